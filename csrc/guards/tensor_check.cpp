// Tensor guard through the Python API: a handful of attribute reads per tensor.
// (The faster route, reading at::TensorImpl, belongs in this file alone.)
#include "guards/tensor_check.h"

#include <sstream>

namespace cdynamo::guards {
namespace {

struct Names {
  PyObject* dtype = intern("dtype");
  PyObject* device = intern("device");
  PyObject* shape = intern("shape");
  PyObject* stride = intern("stride");
  PyObject* requires_grad = intern("requires_grad");
};
const Names& names() {
  static const Names n;
  return n;
}

// Reads a tuple of ints (torch.Size or tuple) into `out`. False with error set on failure.
bool readInts(PyObject* seq, std::vector<int64_t>* out) {
  if (!PyTuple_Check(seq)) {
    PyErr_SetString(PyExc_TypeError, "expected a tuple of ints");
    return false;
  }
  Py_ssize_t n = PyTuple_GET_SIZE(seq);
  out->resize(n);
  for (Py_ssize_t i = 0; i < n; ++i) {
    long long v = PyLong_AsLongLong(PyTuple_GET_ITEM(seq, i));
    if (v == -1 && PyErr_Occurred()) return false;
    (*out)[i] = v;
  }
  return true;
}

// Compares a tuple of ints with `expected` without allocating.
bool intsEqual(PyObject* seq, const std::vector<int64_t>& expected) {
  if (!PyTuple_Check(seq) || PyTuple_GET_SIZE(seq) != static_cast<Py_ssize_t>(expected.size()))
    return false;
  for (size_t i = 0; i < expected.size(); ++i) {
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(PyTuple_GET_ITEM(seq, i), &overflow);
    if (overflow || v != expected[i]) {
      PyErr_Clear();
      return false;
    }
  }
  return true;
}

std::string intsText(const std::vector<int64_t>& v) {
  std::ostringstream s;
  s << "[";
  for (size_t i = 0; i < v.size(); ++i) s << (i ? ", " : "") << v[i];
  s << "]";
  return s.str();
}

std::string reprOf(PyObject* o) {
  Ref r = Ref::steal(PyObject_Str(o));
  if (!r) {
    PyErr_Clear();
    return "?";
  }
  return PyUnicode_AsUTF8(r.get());
}

}  // namespace

bool captureTensorSpec(PyObject* t, TensorSpec* out) {
  const Names& n = names();
  out->type = Ref::borrow(reinterpret_cast<PyObject*>(Py_TYPE(t)));
  out->dtype = Ref::steal(PyObject_GetAttr(t, n.dtype));
  if (!out->dtype) return false;
  out->device = Ref::steal(PyObject_GetAttr(t, n.device));
  if (!out->device) return false;
  Ref rg = Ref::steal(PyObject_GetAttr(t, n.requires_grad));
  if (!rg) return false;
  out->requires_grad = rg.get() == Py_True;
  Ref shape = Ref::steal(PyObject_GetAttr(t, n.shape));
  if (!shape || !readInts(shape.get(), &out->sizes)) return false;
  Ref stride = Ref::steal(PyObject_CallMethodNoArgs(t, n.stride));
  if (!stride || !readInts(stride.get(), &out->strides)) return false;
  return true;
}

bool tensorMatches(const TensorSpec& spec, PyObject* t) {
  if (reinterpret_cast<PyObject*>(Py_TYPE(t)) != spec.type.get()) return false;
  const Names& n = names();
  Ref dtype = Ref::steal(PyObject_GetAttr(t, n.dtype));
  if (dtype.get() != spec.dtype.get()) return PyErr_Clear(), false;
  Ref rg = Ref::steal(PyObject_GetAttr(t, n.requires_grad));
  if (!rg || (rg.get() == Py_True) != spec.requires_grad) return PyErr_Clear(), false;
  Ref shape = Ref::steal(PyObject_GetAttr(t, n.shape));
  if (!shape || !intsEqual(shape.get(), spec.sizes)) return PyErr_Clear(), false;
  Ref stride = Ref::steal(PyObject_CallMethodNoArgs(t, n.stride));
  if (!stride || !intsEqual(stride.get(), spec.strides)) return PyErr_Clear(), false;
  Ref device = Ref::steal(PyObject_GetAttr(t, n.device));
  if (!device) return PyErr_Clear(), false;
  int eq = PyObject_RichCompareBool(device.get(), spec.device.get(), Py_EQ);
  if (eq != 1) return PyErr_Clear(), false;
  return true;
}

std::string tensorMismatch(const TensorSpec& spec, PyObject* t) {
  if (reinterpret_cast<PyObject*>(Py_TYPE(t)) != spec.type.get())
    return std::string("type is ") + Py_TYPE(t)->tp_name + ", expected " +
           reinterpret_cast<PyTypeObject*>(spec.type.get())->tp_name;
  TensorSpec now;
  if (!captureTensorSpec(t, &now)) {
    PyErr_Clear();
    return "could not read tensor metadata";
  }
  if (now.dtype.get() != spec.dtype.get())
    return "dtype is " + reprOf(now.dtype.get()) + ", expected " + reprOf(spec.dtype.get());
  if (now.requires_grad != spec.requires_grad)
    return std::string("requires_grad is ") + (now.requires_grad ? "True" : "False") +
           ", expected " + (spec.requires_grad ? "True" : "False");
  if (now.sizes != spec.sizes)
    return "size is " + intsText(now.sizes) + ", expected " + intsText(spec.sizes);
  if (now.strides != spec.strides)
    return "stride is " + intsText(now.strides) + ", expected " + intsText(spec.strides);
  int eq = PyObject_RichCompareBool(now.device.get(), spec.device.get(), Py_EQ);
  if (eq != 1) {
    PyErr_Clear();
    return "device is " + reprOf(now.device.get()) + ", expected " + reprOf(spec.device.get());
  }
  return "";
}

std::string describeTensorSpec(const TensorSpec& spec) {
  std::ostringstream s;
  s << reinterpret_cast<PyTypeObject*>(spec.type.get())->tp_name << "(dtype=" << reprOf(spec.dtype.get())
    << ", device=" << reprOf(spec.device.get()) << ", size=" << intsText(spec.sizes)
    << ", stride=" << intsText(spec.strides)
    << ", requires_grad=" << (spec.requires_grad ? "True" : "False") << ")";
  return s.str();
}

}  // namespace cdynamo::guards
