"""With cdynamo.install(), a Hugging Face transformers model compiled by nn.Module.compile()
/ torch.compile runs through cdynamo (its stats prove it; torch._dynamo compiles nothing)
with the outputs of eager; the same for torch.compile inside a plain training loop.

Graph counts are not checked here (how many graphs cdynamo makes of BERT is the graph
break work's); the outputs are.
"""
import pytest
import torch
import torch._dynamo.convert_frame

import cdynamo

transformers = pytest.importorskip(
    "transformers", reason="transformers is not installed (make test's set-up installs it from requirements-dev.txt)")


@pytest.fixture
def dynamo_calls(monkeypatch):
    calls = []
    real = torch._dynamo.convert_frame._compile

    def spy(code, *args, **kwargs):
        calls.append(code.co_name)
        return real(code, *args, **kwargs)

    monkeypatch.setattr(torch._dynamo.convert_frame, "_compile", spy)
    cdynamo.install()
    yield calls
    cdynamo.uninstall()


def small_bert():
    cfg = transformers.BertConfig(vocab_size=96, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                  intermediate_size=64, max_position_embeddings=32)
    torch.manual_seed(0)
    return transformers.BertModel(cfg).eval()


def test_module_compile_of_a_transformers_model(dynamo_calls):
    model = small_bert()
    ids = torch.randint(0, 96, (2, 8), generator=torch.Generator().manual_seed(1))
    mask = torch.ones(2, 8, dtype=torch.long)
    with torch.no_grad():
        expected = model(input_ids=ids, attention_mask=mask).last_hidden_state
        model.compile(backend="eager")  # the library's own nn.Module.compile -> torch.compile
        first = model(input_ids=ids, attention_mask=mask).last_hidden_state
        again = model(input_ids=ids, attention_mask=mask).last_hidden_state
    torch.testing.assert_close(first, expected)
    torch.testing.assert_close(again, expected)
    s = cdynamo.stats()
    assert s["frames_captured"] >= 1 and s["graphs_compiled"] >= 1 and s["cache_hits"] >= 1
    assert dynamo_calls == []


def test_torch_compile_in_a_training_loop(dynamo_calls):
    def train(compile_it):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.LayerNorm(16),
                                    torch.nn.Linear(16, 1))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        step_model = torch.compile(model, backend="aot_eager") if compile_it else model
        data = torch.randn(5, 4, 8, generator=torch.Generator().manual_seed(2))
        target = torch.randn(5, 4, 1, generator=torch.Generator().manual_seed(3))
        losses = []
        for x, y in zip(data, target):
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(step_model(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return losses, [p.detach().clone() for p in model.parameters()]

    eager_losses, eager_params = train(False)
    losses, params = train(True)
    torch.testing.assert_close(losses, eager_losses)
    for a, b in zip(params, eager_params):
        torch.testing.assert_close(a, b)
    s = cdynamo.stats()
    assert s["frames_captured"] >= 1 and s["cache_hits"] >= 4
    assert dynamo_calls == []
