// The fake-tensor mode of a trace (GraphBuilder::begin/finish), and FakeTensors of it made
// directly from a spec (the memo's results and the input shortcut's fakes).
#include "graph/graph_builder.h"

#include <optional>

#include "graph/fake_autograd.h"
#include "graph/fake_propagation.h"
#include "graph/torch_refs.h"
#include "support/lookup.h"

namespace cdynamo::graph {

namespace {
thread_local int tls_fake_propagation = 0;  // builders between begin() and finish() on this thread
}  // namespace

bool inFakePropagation() { return tls_fake_propagation > 0; }

FakePropagationPaused::FakePropagationPaused() : saved_(tls_fake_propagation) { tls_fake_propagation = 0; }
FakePropagationPaused::~FakePropagationPaused() { tls_fake_propagation = saved_; }

namespace {
// torch._C._autograd._saved_tensors_hooks_set_tracing (new reference), or null with an error.
Ref savedTensorsHooksSetTracing() {
  PyObject* autograd = lookup(Obj::torch_C_autograd);
  return autograd ? Ref::steal(PyObject_GetAttrString(autograd, "_saved_tensors_hooks_set_tracing")) : Ref();
}
}  // namespace

bool GraphBuilder::begin(bool fullgraph) {
  const TorchRefs* t = torchRefs();
  if (!t) return false;
  int capture = configFlag("capture_scalar_outputs");
  if (capture < 0) return false;
  capture_scalars_ = capture == 1 || fullgraph;
  // Sizes may be symbolic: dynamic=True, marked inputs, or a recompile under automatic
  // dynamic (the code object has seen sizes before: its memory is not empty).
  int automatic = configFlag("automatic_dynamic_shapes");
  if (automatic < 0) return false;
  symbolic_ = dyn_.mode == 1 || dyn_.marked_inputs ||
              (dyn_.mode == -1 && automatic == 1 && dyn_.memory && PyDict_Check(dyn_.memory) &&
               PyDict_GET_SIZE(dyn_.memory) > 0);
  if (capture_scalars_ || symbolic_ || dyn_.shape_env) {
    // As torch._dynamo does: a ShapeEnv for the trace. With capture_scalar_outputs it allows
    // scalar outputs (Tensor.item() -> an unbacked symbol); with symbolic sizes every input
    // fake is made with a symbolic context saying which dims are symbols (_shapes.input_fake).
    shape_env_ = Ref::steal(PyObject_CallNoArgs(lookup(Obj::torch_ShapeEnv)));
    if (!shape_env_) return false;
    Ref kw = Ref::steal(Py_BuildValue("{s:O,s:O}", "shape_env", shape_env_.get(), "static_shapes",
                                      symbolic_ ? Py_False : Py_True));
    Ref no_args = Ref::steal(PyTuple_New(0));
    if (!kw || !no_args) return false;
    mode_ = Ref::steal(PyObject_Call(lookup(Obj::torch_FakeTensorMode), no_args.get(), kw.get()));
  } else {
    mode_ = Ref::steal(PyObject_CallNoArgs(lookup(Obj::torch_FakeTensorMode)));
  }
  if (!mode_) return false;
  if (symbolic_) {
    // FakeTensorMode's dispatch cache keys a call with symbolic sizes on the trace's own,
    // fresh ShapeEnv: in a trace it rarely hits (the output-metadata memo answers repeated
    // calls first), and each miss pays for the key and for synthesizing a second output to
    // validate the entry, under a ShapeEnv every size a Python SymNode computation: about
    // half of a dynamic trace's fake propagation. Off for the trace (torch's uncached path,
    // the reference); back on for the backend (callBackend), whose re-traces repeat calls.
    Ref on = Ref::steal(PyObject_GetAttrString(mode_.get(), "cache_enabled"));
    if (!on) return false;
    cache_was_enabled_ = Ref::borrow(on.get());
    if (PyObject_SetAttrString(mode_.get(), "cache_enabled", Py_False) < 0) return false;
  }
  Ref allow = Ref::steal(PyObject_GetAttrString(mode_.get(), "_allow_unsafe_data_ptr_access"));
  if (!allow) return false;
  allow_data_ptr_ = PyObject_IsTrue(allow.get()) == 1;
  Ref r = Ref::steal(PyObject_CallMethod(mode_.get(), "__enter__", nullptr));
  if (!r) return false;
  entered_ = true;
  ++tls_fake_propagation;
  // Saved-tensor hooks the program set (torch.autograd.graph.saved_tensors_hooks) are for its
  // real tensors: the fake ops of the trace must not run them (a user's pack hook would see
  // FakeTensors, once more than eagerly). torch._dynamo marks its tracing the same way.
  Ref set_tracing = savedTensorsHooksSetTracing();
  Ref prev = set_tracing ? Ref::steal(PyObject_CallOneArg(set_tracing.get(), Py_True)) : Ref();
  if (!prev) return false;
  hooks_tracing_was_ = prev.get() == Py_True;
  hooks_tracing_set_ = true;
  return true;
}

void GraphBuilder::finish() {
  if (!entered_) return;
  entered_ = false;
  --tls_fake_propagation;
  // Keep a pending exception (if any) across __exit__.
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  if (hooks_tracing_set_) {
    hooks_tracing_set_ = false;
    Ref set_tracing = savedTensorsHooksSetTracing();
    Ref done = set_tracing ? Ref::steal(PyObject_CallOneArg(set_tracing.get(), hooks_tracing_was_ ? Py_True : Py_False))
                           : Ref();
    if (!done) PyErr_Clear();
  }
  Ref r = Ref::steal(PyObject_CallMethod(mode_.get(), "__exit__", "OOO", Py_None, Py_None, Py_None));
  if (!r) PyErr_Clear();
  PyErr_Restore(type, value, tb);
}

bool GraphBuilder::templateDictOk(PyObject* dict, bool allow_param) const {
  // The attributes FakeTensor.__new__ sets: this mode, the fake device, and Nones (no
  // propagated constant, no real tensor, empty memos); an input may be a parameter.
  // makeFake stores them with setattr: a name that is a class attribute of FakeTensor (a
  // descriptor would take the store) is refused.
  const TorchRefs* t = torchRefs();
  if (!t) return PyErr_Clear(), false;
  PyObject *k, *v;
  Py_ssize_t pos = 0;
  while (PyDict_Next(dict, &pos, &k, &v)) {
    if (!PyUnicode_Check(k)) return false;
    if (_PyType_Lookup(reinterpret_cast<PyTypeObject*>(lookup(Obj::torch_FakeTensor)), k)) return false;
    if (PyUnicode_CompareWithASCIIString(k, "fake_mode") == 0) {
      if (v != mode_.get()) return false;
    } else if (PyUnicode_CompareWithASCIIString(k, "_fake_device") == 0) {
      continue;
    } else if (allow_param && PyUnicode_CompareWithASCIIString(k, "_is_param") == 0) {
      if (v != Py_True) return false;
    } else if (v != Py_None) {
      return false;
    }
  }
  return true;
}

Ref GraphBuilder::makeFake(const FakeSpec& spec, const std::vector<PyObject*>& grad_inputs, bool input,
                           bool input_requires_grad) {
  const TorchRefs* t = torchRefs();
  if (!t) return Ref();
  // What FakeTensor.__new__ does, without its Python: an empty meta tensor with the
  // metadata, made a FakeTensor by Tensor._make_subclass, with the attributes of the op's
  // own result. All with the mode's dispatch off (it is entered for the trace).
  Ref fake;
  {
    std::optional<torchimpl::NoInferenceMode> not_inference;
    if (input) not_inference.emplace();
    torchimpl::NoPythonDispatch no_dispatch;
    // With a template (under a ShapeEnv): an empty meta tensor given its layout (adoptLayout).
    static Ref& empty_shape = *new Ref();  // Note [Python references in statics] (support/pyref.h)
    if (!empty_shape) empty_shape = Ref::steal(Py_BuildValue("(i)", 0));
    if (!empty_shape) return Ref();
    PyObject* eargs[] = {spec.like ? empty_shape.get() : spec.shape.get(), spec.like ? empty_shape.get() : spec.stride.get(),
                         spec.dtype.get(), t->meta_device.get()};
    Ref elem = Ref::steal(PyObject_Vectorcall(lookup(Obj::torch_empty_strided), eargs, 2, t->empty_kwnames.get()));
    if (!elem) return Ref();
    if (spec.like && !torchimpl::adoptLayout(elem.get(), spec.like.get())) return Ref();
    PyObject* sargs[] = {lookup(Obj::torch_FakeTensor), elem.get(), input_requires_grad ? Py_True : Py_False, Py_True,
                         spec.device.get()};
    fake = Ref::steal(PyObject_Vectorcall(lookup(Obj::torch_Tensor_make_subclass), sargs, 3, t->subclass_kwnames.get()));
    if (!fake) return Ref();
    Ref flag = Ref::steal(PyObject_CallOneArg(
        lookup(allow_data_ptr_ ? Obj::torch_C_set_warn_deprecated_on_mutable_data_ptr
                               : Obj::torch_C_set_throw_on_mutable_data_ptr),
        fake.get()));
    if (!flag) return Ref();
    // Attribute by attribute, in the template's order (the order FakeTensor.__init__ sets
    // them): the instance keeps CPython's key-sharing dict, ~300 bytes, where filling a
    // materialized __dict__ with PyDict_Update made a combined one of ~830 per fake (and the
    // GraphModule keeps one per node). templateDictOk admits only names FakeTensor has no
    // class attribute for, so this stores exactly what the update stored.
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    while (PyDict_Next(spec.dict.get(), &pos, &key, &value))
      if (PyObject_GenericSetAttr(fake.get(), key, value) < 0) return Ref();
    if (spec.requires_grad &&
        !torchimpl::attachErrorGradFn(fake.get(), spec.device_str.c_str(), grad_inputs.data(), grad_inputs.size(),
                                      "cdynamo: differentiating through a fake tensor made by the graph builder's "
                                      "output-metadata memo"))
      return Ref();
  }
  if (!spec.view) return fake;
  // The view, made by the fake mode itself (one dispatch instead of the op's many): a
  // FakeTensor sharing the base's storage, an autograd view of it.
  PyObject* vargs[] = {fake.get(), spec.view_size.get(), spec.view_stride.get(), spec.view_offset.get()};
  return Ref::steal(PyObject_VectorcallMethod(interned(Str::as_strided), vargs, 4, nullptr));
}

}  // namespace cdynamo::graph
