// The tensor kind (Kind::Tensor): what its attributes mean in the trace.
#include <cstring>
#include <string>

#include "support/lookup.h"
#include "trace/engine/graph_calls.h"
#include "trace/protocol/attributes.h"
#include "trace/protocol/constants.h"
#include "trace/engine/scalars.h"
#include "trace/kinds/tensor_subclass.h"
#include "trace/tracer.h"

namespace cdynamo::trace {

using graph::NodeOp;

// Attributes of a tensor: methods (called later as call_method), metadata as constants, tensor-valued attributes as getattr nodes.
Result<ValuePtr> tensorAttr(Tracer& t, const ValuePtr& obj, PyObject* name) {
  const char* n = PyUnicode_AsUTF8(name);
  if (isScalarValue(t, obj))  // a number read from a tensor: not a tensor's attributes
    return t.fail(std::string("attribute '") + n + "' of a value read from a tensor (Tensor.item()) is not supported yet");
  // The version counter counts in-place changes of the real tensor, before the call
  // too: a fake's (0 for an input) is not it, and nothing guards it.
  if (strcmp(n, "_version") == 0) return t.fail("Tensor._version (the real tensor's version counter) is not modeled");
  if (strcmp(n, "__class__") == 0) {  // its type, as type(x) answers
    PyObject* type = typeOf(t, obj);
    if (!type) return t.fail("the class of a tensor");
    return Value::callable(type);
  }
  PyObject* tt = lookup(Obj::torch_Tensor);
  if (!tt) return t.failFromPython("torch.Tensor");
  PyObject* descr = _PyType_Lookup(reinterpret_cast<PyTypeObject*>(tt), name);
  if (!descr) {
    // An inner tensor of a traceable wrapper subclass (t.a of a TwoTensor): a getattr node,
    // so it is read where the program reads it. Not an input of its own: an in-place op on
    // the instance before the read (t.add_(1); t.a) changes it, and a backend that
    // functionalizes the graph (AOT autograd) writes input mutations back at its end only.
    PyObject* fake = t.graph().fake(obj->as<Tensor>().node);
    if (fake && wrapperSubclass(reinterpret_cast<PyObject*>(Py_TYPE(fake))) &&
        PyObject_HasAttr(reinterpret_cast<PyObject*>(Py_TYPE(fake)), name) == 0) {
      Ref flat = Ref::steal(PyObject_CallMethod(fake, "__tensor_flatten__", nullptr));
      if (!flat) return t.failFromPython("__tensor_flatten__ of a tensor subclass value");
      PyObject* names = PyTuple_Check(flat.get()) && PyTuple_GET_SIZE(flat.get()) == 2 ? PyTuple_GET_ITEM(flat.get(), 0) : nullptr;
      int found = names ? PySequence_Contains(names, name) : 0;
      if (found < 0) return t.failFromPython("__tensor_flatten__ of a tensor subclass value");
      PyObject* getattr = found == 1 ? lookup(Obj::builtins_getattr) : nullptr;
      if (getattr) return recordCall(t, NodeOp::CallFunction, getattr, {obj, Value::constant(name)}, {});
    }
    return t.fail(std::string("Tensor has no attribute '") + n + "'");
  }
  if (Py_TYPE(descr)->tp_descr_set == nullptr || PyFunction_Check(descr))
    return Value::namedMethod(obj, name);  // methods: called later as call_method
  // The result of min()/max() over tensors stands for the item that won (markChoice):
  // what the where() node it is computed as answers alike (metadata, values) is read
  // from it; state of the object itself (.grad, ._base, ...) breaks the graph.
  if (t.graph().choiceOf(obj->as<Tensor>().node)) {
    static const char* const kValueAttrs[] = {"shape", "dtype", "device", "ndim", "requires_grad", "is_leaf",
                                              "grad_fn", "layout", "T", "mT", "H", "mH", "real", "imag", "data",
                                              "is_cuda", "is_cpu", "is_meta", "is_sparse", "is_quantized",
                                              "itemsize", "nbytes", "is_nested"};
    bool value_attr = false;
    for (const char* a : kValueAttrs) value_attr = value_attr || strcmp(n, a) == 0;
    if (!value_attr)
      return t.fail(std::string("Tensor.") + n + " of the result of min()/max() over tensors (the state of the item "
                    "that won, which the trace computes as a new tensor)");
  }
  // The gradient of a tensor the program passed in (a parameter's .grad, read by an
  // optimizer step or clip_grad_norm_): an input of its own, loaded and guarded like the
  // tensor (None guarded to stay None), as torch._dynamo makes it. A getattr node would
  // read the attribute of what the backend gives the graph: AOT autograd's functional
  // wrappers of the inputs have no .grad.
  if (strcmp(n, "grad") == 0) {
    int node = obj->as<Tensor>().node;
    int reg = t.inputRegOf(node);
    PyObject* real = reg >= 0 ? t.exampleOf(node) : nullptr;
    if (real) {
      if (ValuePtr stored = t.effects().overlayAttr(reg, name)) return stored;  // set earlier in the trace

      Ref grad = Ref::steal(PyObject_GetAttr(real, name));
      if (!grad) return t.failFromPython("Tensor.grad");
      return t.wrap(grad.get(), t.load(guards::LoadKind::Attr, reg, 0, name, t.guards().sourceName(reg) + ".grad"));
    }
  }
  // Data attributes: metadata (shape, dtype, ...) answer as constants; tensor-valued
  // ones (x.T, x.mT) become getattr nodes.
  PyObject* getattr = lookup(Obj::builtins_getattr);
  if (!getattr) return t.failFromPython("builtins.getattr");
  return recordCall(t, NodeOp::CallFunction, getattr, {obj, Value::constant(name)}, {});
}

// x.grad = value (None or a tensor) on a tensor the program passed in: replayed after the graph
// with setattr, as any attribute store on an object of the program; reads of x.grad later in
// the trace see it (tensorAttr). The checks the setter makes on the new gradient (same
// sizes, dtype and device) are made here, so the replay cannot raise where eager would have
// raised at the store: a mismatch is left to eager at a graph break.
Done storeTensorGrad(Tracer& t, const ValuePtr& obj, const ValuePtr& value) {
  int node = obj->as<Tensor>().node;
  int reg = t.inputRegOf(node);
  if (reg < 0 || !t.exampleOf(node))
    return t.fail("setting .grad of a tensor the trace computes is not supported yet");
  if (!value->isNone()) {
    if (!value->is(Kind::Tensor) || isScalarValue(t, value))
      return t.fail("setting .grad to something other than a tensor or None");
    PyObject* mine = t.graph().fake(node);
    PyObject* theirs = t.graph().fake(value->as<Tensor>().node);
    static const char* const kSame[] = {"shape", "dtype", "device", "layout"};
    for (const char* a : kSame) {
      Ref x = Ref::steal(PyObject_GetAttrString(mine, a));
      Ref y = Ref::steal(PyObject_GetAttrString(theirs, a));
      int same = x && y ? PyObject_RichCompareBool(x.get(), y.get(), Py_EQ) : -1;
      if (same != 1) {
        PyErr_Clear();
        return t.fail(std::string("setting .grad to a tensor of another ") + a + " (the setter checks it)");
      }
    }
  }
  static PyObject* const grad = PyUnicode_InternFromString("grad");
  return t.effects().setAttr(reg, grad, value);
}

}  // namespace cdynamo::trace
