// Calling the backend with the GraphModule (in a TracingContext of the trace's fake mode
// when the graph may hold symbolic scalars).
#include "graph/graph_builder.h"

#include "graph/fake_autograd.h"
#include "graph/fake_propagation.h"
#include "graph/torch_refs.h"
#include "support/lookup.h"

namespace cdynamo::graph {

Ref GraphBuilder::callBackend(PyObject* backend, PyObject* gm, PyObject* example_inputs) {
  FakePropagationPaused paused;
  if (!shape_env_) return Ref::steal(PyObject_CallFunctionObjArgs(backend, gm, example_inputs, nullptr));
  const TorchRefs* t = torchRefs();
  if (!t) return Ref();
  // A backend that re-traces (AOT autograd) fakes the example inputs again with
  // FakeTensorMode.from_tensor: each must find the fake the graph has, or it gets a new
  // one, with fresh symbols under a symbolic mode. The input shortcut's fakes are
  // registered with the converter first.
  for (auto& [storage, real] : input_storages_) {
    if (!real) continue;
    if (!registerWithConverter(real)) return Ref();
    real = nullptr;
  }
  // The fakes the backend's conversion finds must describe the inputs as the graph receives
  // them; an input the trace changed in place has a fake that says what it became (requires
  // grad after x.add_(y), another shape after x.unsqueeze_(0)): AOT autograd would compile for
  // that and give, say, an output requiring grad that eagerly does not. Such an input gets a
  // fake made anew from it (torch._dynamo hands the backend a fresh fake mode instead).
  for (const Node& n : nodes_) {
    if ((n.op != NodeOp::Placeholder && n.op != NodeOp::GetAttr) || !n.real || !n.fake) continue;
    if (!PyObject_TypeCheck(n.real.get(), reinterpret_cast<PyTypeObject*>(lookup(Obj::torch_Tensor)))) continue;
    if (!torchimpl::fakeDiffersFromInput(n.fake.get(), n.real.get())) continue;
    Ref fresh = Ref::steal(PyObject_CallFunctionObjArgs(lookup(Obj::cdynamo_shapes_entry_fake), mode_.get(),
                                                        n.real.get(), n.fake.get(), nullptr));
    if (!fresh) return Ref();
    entry_fakes_.push_back(std::move(fresh));  // the converter's memo holds its fakes weakly
  }
  if (cache_was_enabled_ && PyObject_SetAttrString(mode_.get(), "cache_enabled", cache_was_enabled_.get()) < 0)
    return Ref();
  Ref context = Ref::steal(PyObject_CallOneArg(lookup(Obj::torch_guards_TracingContext), mode_.get()));
  Ref manager = context ? Ref::steal(PyObject_CallOneArg(lookup(Obj::torch_guards_tracing), context.get())) : Ref();
  Ref entered = manager ? Ref::steal(PyObject_CallMethod(manager.get(), "__enter__", nullptr)) : Ref();
  if (!entered) return Ref();
  Ref result = Ref::steal(PyObject_CallFunctionObjArgs(backend, gm, example_inputs, nullptr));
  // Leave the context on every path, keeping the backend's error (if any) as the one set.
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  Ref exited = Ref::steal(PyObject_CallMethod(manager.get(), "__exit__", "OOO", Py_None, Py_None, Py_None));
  if (!exited) {
    if (type) PyErr_Clear();
    else return Ref();  // leaving failed after a success: report that
  }
  PyErr_Restore(type, value, tb);
  return result;
}

}  // namespace cdynamo::graph
