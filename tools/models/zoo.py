"""The real models cdynamo is measured on: timm and Hugging Face transformers, built
from their configs with random weights (nothing is downloaded).

Each entry builds (model, args, kwargs) from a seed, so every frontend in a run gets an
identical copy. `size="full"` is what `make models` measures; `size="quick"` is the same
architecture on smaller inputs, for the subset that runs inside `make test`.

Dropout is configured off (p=0) in the transformers models; timm's models have none by
default. The modules that apply dropout are still there (as a user's would be). Some
models still draw random numbers in training (switch's router multiplies its input by
uniform jitter noise), so the training step in worker.py seeds the generator before each
frontend's forward: all of them draw the same numbers, and gradients compare with eager.
"""
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent

TIMM = ["resnet18", "mobilenetv3_small_100", "efficientnet_b0", "vit_tiny_patch16_224", "convnext_atto",
        "deit_tiny_patch16_224"]
HF = ["bert", "gpt2", "llama", "t5", "distilbert", "bart"]
ALL = TIMM + HF
# More transformers architectures from the same small configs, measured on request
# (`benchmarks/models.py --models roberta,...`), not by `make models`: models the fixes
# were not made on.
EXTRA = ["roberta", "gpt_neo", "mistral", "opt", "vit"]
# Further architectures nobody tuned cdynamo on (`--models more` runs them all). Any timm
# model also works by name with a "timm:" prefix (`--models timm:regnetx_002,timm:levit_128s`).
MORE = ["albert", "electra", "xlm_roberta", "mpnet", "deberta_v2", "mobilebert", "qwen2", "qwen3", "phi",
        "gemma", "gemma2", "olmo", "starcoder2", "falcon", "bloom", "gptj", "gpt_bigcode", "pegasus",
        "marian"]
# A second set nobody tuned on (`--models more2`), added 2026-12-02: MoE routing (mixtral, switch,
# jamba), state-space scans (mamba, jamba), relative/rotary attention variants, seq2seq families.
MORE2 = ["gpt_neox", "codegen", "mixtral", "mbart", "blenderbot", "m2m100", "xlnet", "funnel", "squeezebert",
         "convbert", "roformer", "biogpt", "stablelm", "cohere", "granite", "phi3", "mamba", "persimmon", "xglm",
         "ernie", "camembert", "layoutlm", "switch", "mt5", "umt5", "longt5", "led", "olmo2", "nemotron", "jamba",
         "megatron_bert", "big_bird", "data2vec_text", "xmod"]
KNOWN = ALL + EXTRA + MORE + MORE2

# Shared by every transformers config: small enough to build from config in a test
# (2 layers, hidden 64, vocab 1000), nothing downloaded.
VOCAB, HIDDEN, LAYERS, HEADS, FFN, POSITIONS = 1000, 64, 2, 4, 128, 128


def known(name):
    return name in KNOWN or (name.startswith("timm:") and len(name) > 5)


def family(name):
    return "timm" if name in TIMM or name.startswith("timm:") else "transformers"


def _import_timm():
    if "timm" not in sys.modules:
        sys.path.insert(0, str(HERE))
        import tv_shim

        if tv_shim.needed():
            tv_shim.install()
    import timm

    return timm


def _hf_config(name):
    import transformers as tf

    common = dict(vocab_size=VOCAB)
    if name == "bert":
        return tf.BertConfig(hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                             intermediate_size=FFN, max_position_embeddings=POSITIONS, hidden_dropout_prob=0.0,
                             attention_probs_dropout_prob=0.0, **common)
    if name == "gpt2":
        return tf.GPT2Config(n_embd=HIDDEN, n_layer=LAYERS, n_head=HEADS, n_inner=FFN, n_positions=POSITIONS,
                             resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=1, eos_token_id=2,
                             **common)
    if name == "llama":
        return tf.LlamaConfig(hidden_size=HIDDEN, intermediate_size=FFN, num_hidden_layers=LAYERS,
                              num_attention_heads=HEADS, num_key_value_heads=HEADS // 2,
                              max_position_embeddings=POSITIONS, **common)
    if name == "t5":
        return tf.T5Config(d_model=HIDDEN, d_kv=HIDDEN // HEADS, d_ff=FFN, num_layers=LAYERS,
                           num_decoder_layers=LAYERS, num_heads=HEADS, dropout_rate=0.0, decoder_start_token_id=0,
                           **common)
    if name == "distilbert":
        return tf.DistilBertConfig(dim=HIDDEN, n_layers=LAYERS, n_heads=HEADS, hidden_dim=FFN,
                                   max_position_embeddings=POSITIONS, dropout=0.0, attention_dropout=0.0, **common)
    if name == "bart":
        return tf.BartConfig(d_model=HIDDEN, encoder_layers=LAYERS, decoder_layers=LAYERS,
                             encoder_attention_heads=HEADS, decoder_attention_heads=HEADS, encoder_ffn_dim=FFN,
                             decoder_ffn_dim=FFN, max_position_embeddings=POSITIONS, dropout=0.0,
                             attention_dropout=0.0, activation_dropout=0.0, **common)
    if name == "roberta":
        return tf.RobertaConfig(hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                                intermediate_size=FFN, max_position_embeddings=POSITIONS, hidden_dropout_prob=0.0,
                                attention_probs_dropout_prob=0.0, **common)
    if name == "gpt_neo":
        return tf.GPTNeoConfig(hidden_size=HIDDEN, num_layers=LAYERS, num_heads=HEADS, intermediate_size=FFN,
                               attention_types=[[["global", "local"], LAYERS // 2]], window_size=8,
                               max_position_embeddings=POSITIONS, embed_dropout=0.0, attention_dropout=0.0,
                               resid_dropout=0.0, **common)
    if name == "mistral":
        return tf.MistralConfig(hidden_size=HIDDEN, intermediate_size=FFN, num_hidden_layers=LAYERS,
                                num_attention_heads=HEADS, num_key_value_heads=HEADS // 2,
                                max_position_embeddings=POSITIONS, sliding_window=8, **common)
    if name == "opt":
        return tf.OPTConfig(hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS, ffn_dim=FFN,
                            word_embed_proj_dim=HIDDEN, max_position_embeddings=POSITIONS, dropout=0.0,
                            attention_dropout=0.0, **common)
    return _more_config(tf, name, common)


# name -> (config class, model class, how the config spells the sizes)
_ENCODER = dict(hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS, intermediate_size=FFN,
                max_position_embeddings=POSITIONS, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
_DECODER = dict(hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS, intermediate_size=FFN,
                max_position_embeddings=POSITIONS)
_SEQ2SEQ = dict(d_model=HIDDEN, encoder_layers=LAYERS, decoder_layers=LAYERS, encoder_attention_heads=HEADS,
                decoder_attention_heads=HEADS, encoder_ffn_dim=FFN, decoder_ffn_dim=FFN,
                max_position_embeddings=POSITIONS, dropout=0.0, attention_dropout=0.0, activation_dropout=0.0)
_GPT = dict(n_embd=HIDDEN, n_layer=LAYERS, n_head=HEADS, n_inner=FFN, n_positions=POSITIONS, resid_pdrop=0.0,
            embd_pdrop=0.0, attn_pdrop=0.0)
_T5 = dict(d_model=HIDDEN, d_kv=16, d_ff=FFN, num_layers=LAYERS, num_heads=HEADS, dropout_rate=0.0,
           decoder_start_token_id=0)
_MORE = {
    "albert": ("AlbertConfig", "AlbertModel", dict(_ENCODER, embedding_size=HIDDEN)),
    "electra": ("ElectraConfig", "ElectraModel", dict(_ENCODER, embedding_size=HIDDEN)),
    "xlm_roberta": ("XLMRobertaConfig", "XLMRobertaModel", _ENCODER),
    "mpnet": ("MPNetConfig", "MPNetModel", _ENCODER),
    "deberta_v2": ("DebertaV2Config", "DebertaV2Model", _ENCODER),
    "mobilebert": ("MobileBertConfig", "MobileBertModel",
                   dict(_ENCODER, embedding_size=HIDDEN // 2, intra_bottleneck_size=HIDDEN // 2,
                        true_hidden_size=HIDDEN // 2, num_feedforward_networks=2)),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", dict(_DECODER, num_key_value_heads=HEADS // 2)),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", dict(_DECODER, num_key_value_heads=HEADS // 2, head_dim=16)),
    "phi": ("PhiConfig", "PhiForCausalLM", dict(_DECODER, resid_pdrop=0.0, embd_pdrop=0.0, attention_dropout=0.0)),
    "gemma": ("GemmaConfig", "GemmaForCausalLM", dict(_DECODER, num_key_value_heads=HEADS // 2, head_dim=16)),
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM",
               dict(_DECODER, num_key_value_heads=HEADS // 2, head_dim=16, sliding_window=8)),
    "olmo": ("OlmoConfig", "OlmoForCausalLM", _DECODER),
    "starcoder2": ("Starcoder2Config", "Starcoder2ForCausalLM",
                   dict(_DECODER, num_key_value_heads=HEADS // 2, residual_dropout=0.0, embedding_dropout=0.0,
                        attention_dropout=0.0)),
    "falcon": ("FalconConfig", "FalconForCausalLM",
               dict(hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS, hidden_dropout=0.0,
                    attention_dropout=0.0)),
    "bloom": ("BloomConfig", "BloomForCausalLM",
              dict(hidden_size=HIDDEN, n_layer=LAYERS, n_head=HEADS, hidden_dropout=0.0, attention_dropout=0.0)),
    "gptj": ("GPTJConfig", "GPTJForCausalLM", dict(_GPT, rotary_dim=8)),
    "gpt_bigcode": ("GPTBigCodeConfig", "GPTBigCodeForCausalLM", _GPT),
    "pegasus": ("PegasusConfig", "PegasusForConditionalGeneration", dict(_SEQ2SEQ, decoder_start_token_id=0)),
    "marian": ("MarianConfig", "MarianMTModel", dict(_SEQ2SEQ, decoder_start_token_id=0, pad_token_id=0)),
    # MORE2
    "gpt_neox": ("GPTNeoXConfig", "GPTNeoXForCausalLM", dict(_DECODER, hidden_dropout=0.0, attention_dropout=0.0)),
    "codegen": ("CodeGenConfig", "CodeGenForCausalLM", dict(_GPT, rotary_dim=8)),
    "mixtral": ("MixtralConfig", "MixtralForCausalLM",
                dict(_DECODER, num_key_value_heads=HEADS // 2, num_local_experts=4, num_experts_per_tok=2)),
    "mbart": ("MBartConfig", "MBartForConditionalGeneration", dict(_SEQ2SEQ, decoder_start_token_id=0, pad_token_id=0)),
    "blenderbot": ("BlenderbotConfig", "BlenderbotForConditionalGeneration",
                   dict(_SEQ2SEQ, decoder_start_token_id=0, pad_token_id=0)),
    "m2m100": ("M2M100Config", "M2M100ForConditionalGeneration",
               dict(_SEQ2SEQ, decoder_start_token_id=0, pad_token_id=0)),
    "xlnet": ("XLNetConfig", "XLNetModel", dict(d_model=HIDDEN, n_layer=LAYERS, n_head=HEADS, d_inner=FFN, dropout=0.0)),
    "funnel": ("FunnelConfig", "FunnelModel",
               dict(d_model=HIDDEN, n_head=HEADS, d_head=16, d_inner=FFN, block_sizes=[1, 1], hidden_dropout=0.0,
                    attention_dropout=0.0, activation_dropout=0.0)),
    "squeezebert": ("SqueezeBertConfig", "SqueezeBertModel", dict(_ENCODER, embedding_size=HIDDEN)),
    "convbert": ("ConvBertConfig", "ConvBertModel", dict(_ENCODER, embedding_size=HIDDEN)),
    "roformer": ("RoFormerConfig", "RoFormerModel", dict(_ENCODER, embedding_size=HIDDEN)),
    "biogpt": ("BioGptConfig", "BioGptForCausalLM", _ENCODER),
    "stablelm": ("StableLmConfig", "StableLmForCausalLM", dict(_DECODER, num_key_value_heads=HEADS)),
    "cohere": ("CohereConfig", "CohereForCausalLM", dict(_DECODER, num_key_value_heads=HEADS)),
    "granite": ("GraniteConfig", "GraniteForCausalLM", dict(_DECODER, num_key_value_heads=HEADS)),
    "phi3": ("Phi3Config", "Phi3ForCausalLM", dict(_DECODER, num_key_value_heads=HEADS, pad_token_id=0)),
    "mamba": ("MambaConfig", "MambaForCausalLM",
              dict(hidden_size=HIDDEN, num_hidden_layers=LAYERS, state_size=8, expand=2)),
    "persimmon": ("PersimmonConfig", "PersimmonForCausalLM", _DECODER),
    "xglm": ("XGLMConfig", "XGLMForCausalLM",
             dict(d_model=HIDDEN, num_layers=LAYERS, attention_heads=HEADS, ffn_dim=FFN, max_position_embeddings=POSITIONS,
                  dropout=0.0, attention_dropout=0.0, activation_dropout=0.0)),
    "ernie": ("ErnieConfig", "ErnieModel", _ENCODER),
    "camembert": ("CamembertConfig", "CamembertModel", _ENCODER),
    "layoutlm": ("LayoutLMConfig", "LayoutLMModel", _ENCODER),
    "switch": ("SwitchTransformersConfig", "SwitchTransformersForConditionalGeneration",
               dict(_T5, num_experts=4, num_sparse_encoder_layers=1, num_sparse_decoder_layers=1)),
    "mt5": ("MT5Config", "MT5ForConditionalGeneration", _T5),
    "umt5": ("UMT5Config", "UMT5ForConditionalGeneration", _T5),
    "longt5": ("LongT5Config", "LongT5ForConditionalGeneration", _T5),
    "led": ("LEDConfig", "LEDForConditionalGeneration",
            dict(_SEQ2SEQ, decoder_start_token_id=0, pad_token_id=0, max_encoder_position_embeddings=POSITIONS,
                 max_decoder_position_embeddings=POSITIONS, attention_window=[8, 8])),
    "olmo2": ("Olmo2Config", "Olmo2ForCausalLM", _DECODER),
    "nemotron": ("NemotronConfig", "NemotronForCausalLM", dict(_DECODER, num_key_value_heads=HEADS)),
    "jamba": ("JambaConfig", "JambaForCausalLM",
              dict(_DECODER, num_key_value_heads=HEADS, num_experts=2, mamba_d_state=8, attn_layer_period=2,
                   attn_layer_offset=1, expert_layer_period=2, expert_layer_offset=1)),
    "megatron_bert": ("MegatronBertConfig", "MegatronBertModel", _ENCODER),
    "big_bird": ("BigBirdConfig", "BigBirdModel", dict(_ENCODER, attention_type="original_full")),
    "data2vec_text": ("Data2VecTextConfig", "Data2VecTextModel", _ENCODER),
    "xmod": ("XmodConfig", "XmodModel", dict(_ENCODER, languages=["en_XX"], default_language="en_XX")),
}


def _more_config(tf, name, common):
    if name not in _MORE:
        raise KeyError(name)
    config_cls, _, fields = _MORE[name]
    return getattr(tf, config_cls)(**fields, **common)


def _hf_model(name, config):
    import transformers as tf

    cls = {"bert": tf.BertModel, "gpt2": tf.GPT2LMHeadModel, "llama": tf.LlamaForCausalLM,
           "t5": tf.T5ForConditionalGeneration, "distilbert": tf.DistilBertModel,
           "bart": tf.BartForConditionalGeneration, "roberta": tf.RobertaModel, "gpt_neo": tf.GPTNeoForCausalLM,
           "mistral": tf.MistralForCausalLM, "opt": tf.OPTForCausalLM}.get(name)
    if cls is None:
        cls = getattr(tf, _MORE[name][1])
    return cls(config)


def build(name, size="full", seed=0):
    """(model, args, kwargs) for model `name`; the same seed gives identical weights and inputs."""
    torch.manual_seed(seed)
    if name in TIMM or name.startswith("timm:"):
        timm = _import_timm()
        name = name.removeprefix("timm:")
        kw = {}
        if size == "quick" and ("vit" in name or "deit" in name):
            kw["img_size"] = 64
        model = timm.create_model(name, pretrained=False, **kw)
        res = 224 if size == "full" else 64
        x = torch.randn(1 if size == "full" else 2, 3, res, res)
        return model, (x,), {}
    if name == "vit":  # transformers' ViT (timm's is vit_tiny_patch16_224)
        import transformers as tf

        res = 224 if size == "full" else 64
        config = tf.ViTConfig(hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                              intermediate_size=FFN, image_size=res, patch_size=16, hidden_dropout_prob=0.0,
                              attention_probs_dropout_prob=0.0)
        return tf.ViTModel(config), (), {"pixel_values": torch.randn(2, 3, res, res)}
    config = _hf_config(name)
    model = _hf_model(name, config)
    seq = 16 if size == "full" else 8
    ids = torch.randint(1, VOCAB, (2, seq))
    mask = torch.ones(2, seq, dtype=torch.long)
    mask[1, -3:] = 0  # the second sequence is padded
    kwargs = {"input_ids": ids, "attention_mask": mask}
    if name == "mamba":  # a state-space model: no attention mask
        kwargs.pop("attention_mask")
    if name in ("t5", "pegasus", "marian") or name in _MORE and "ConditionalGeneration" in _MORE[name][1]:
        kwargs["decoder_input_ids"] = torch.randint(1, VOCAB, (2, seq // 2))
    return model, (), kwargs


def flatten(out, prefix="out"):
    """[(path, tensor)] of every tensor in a model's output: tensors, tuples, lists, dicts
    (ModelOutput is one), and the attributes of other objects (a KV cache)."""
    found = []

    def visit(v, path, depth):
        if isinstance(v, torch.Tensor):
            found.append((path, v))
        elif depth > 6 or v is None or isinstance(v, (int, float, bool, str)):
            return
        elif isinstance(v, dict):
            for k in v:
                visit(v[k], f"{path}[{k!r}]", depth + 1)
        elif isinstance(v, (list, tuple)):
            for i, item in enumerate(v):
                visit(item, f"{path}[{i}]", depth + 1)
        elif hasattr(v, "__dict__"):
            for k, item in sorted(vars(v).items()):
                visit(item, f"{path}.{k}", depth + 1)

    visit(out, prefix, 0)
    return found


def loss_of(out):
    """A scalar that depends on every floating output (a stand-in for a training loss)."""
    tensors = [t for _, t in flatten(out) if t.is_floating_point() and t.requires_grad]
    return sum(t.float().pow(2).mean() for t in tensors)
