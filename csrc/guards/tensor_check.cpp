// The tensor guard's cold half: readable descriptions and mismatch reasons. The hot check
// and the capture read at::TensorImpl in tensor_check_torch.cpp (the only unit compiled
// against torch's C++ headers).
#include "guards/tensor_check.h"

#include <sstream>

namespace cdynamo::guards {
namespace {

std::string intsText(const std::vector<int64_t>& v) {
  std::ostringstream s;
  s << "[";
  for (size_t i = 0; i < v.size(); ++i) s << (i ? ", " : "") << v[i];
  s << "]";
  return s.str();
}

std::string reprOf(PyObject* o) {
  if (!o) return "?";
  Ref r = Ref::steal(PyObject_Str(o));
  if (!r) {
    PyErr_Clear();
    return "?";
  }
  const char* s = PyUnicode_AsUTF8(r.get());
  if (!s) {
    PyErr_Clear();
    return "?";
  }
  return s;
}

}  // namespace

std::string tensorMismatch(const TensorSpec& spec, PyObject* t) {
  if (reinterpret_cast<PyObject*>(Py_TYPE(t)) != spec.type.get())
    return std::string("type is ") + Py_TYPE(t)->tp_name + ", expected " +
           reinterpret_cast<PyTypeObject*>(spec.type.get())->tp_name;
  TensorSpec now;
  if (!captureTensorSpec(t, &now)) {
    PyErr_Clear();
    return "could not read tensor metadata";
  }
  if (now.scalar_type != spec.scalar_type)
    return "dtype is " + reprOf(now.dtype.get()) + ", expected " + reprOf(spec.dtype.get());
  if (now.requires_grad != spec.requires_grad)
    return std::string("requires_grad is ") + (now.requires_grad ? "True" : "False") +
           ", expected " + (spec.requires_grad ? "True" : "False");
  if (now.sizes != spec.sizes)
    return "size is " + intsText(now.sizes) + ", expected " + intsText(spec.sizes);
  if (now.strides != spec.strides)
    return "stride is " + intsText(now.strides) + ", expected " + intsText(spec.strides);
  if (now.device_type != spec.device_type || now.device_index != spec.device_index)
    return "device is " + reprOf(now.device.get()) + ", expected " + reprOf(spec.device.get());
  if (now.dispatch_keys != spec.dispatch_keys)
    return "dispatch keys are " + detail::dispatchKeysText(now.dispatch_keys) + ", expected " +
           detail::dispatchKeysText(spec.dispatch_keys);
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
