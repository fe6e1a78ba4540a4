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

std::vector<int64_t> contiguousStrides(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> out(sizes.size());
  int64_t running = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    out[i] = running;
    running *= sizes[i] > 1 ? sizes[i] : 1;
  }
  return out;
}

std::string stridesMismatch(const TensorSpec& spec, const int64_t* sizes, const int64_t* strides) {
  std::vector<int64_t> expected = spec.strides;
  if (spec.dynamic_mask) expected = contiguousStrides(std::vector<int64_t>(sizes, sizes + spec.sizes.size()));
  for (size_t i = 0; i < expected.size(); ++i)
    if (strides[i] != expected[i])
      return "stride of dim " + std::to_string(i) + ": expected " + std::to_string(expected[i]) + ", got " +
             std::to_string(strides[i]);
  return "";
}

std::string tensorMismatch(const TensorSpec& spec, PyObject* t, const std::string& what) {
  auto expectedGot = [&](const std::string& property, const std::string& expected, const std::string& got) {
    return property + " of " + what + ": expected " + expected + ", got " + got;
  };
  if (reinterpret_cast<PyObject*>(Py_TYPE(t)) != spec.type.get())
    return expectedGot("type", reinterpret_cast<PyTypeObject*>(spec.type.get())->tp_name, Py_TYPE(t)->tp_name);
  TensorSpec now;
  if (!captureTensorSpec(t, &now)) {
    PyErr_Clear();
    return "the metadata of tensor " + what + " could not be read";
  }
  if (now.scalar_type != spec.scalar_type) return expectedGot("dtype", reprOf(spec.dtype.get()), reprOf(now.dtype.get()));
  if (now.device_type != spec.device_type || now.device_index != spec.device_index)
    return expectedGot("device", reprOf(spec.device.get()), reprOf(now.device.get()));
  if (now.requires_grad != spec.requires_grad)
    return expectedGot("requires_grad", spec.requires_grad ? "True" : "False", now.requires_grad ? "True" : "False");
  if (now.sizes.size() != spec.sizes.size())
    return expectedGot("number of dimensions", std::to_string(spec.sizes.size()), std::to_string(now.sizes.size()));
  for (size_t i = 0; i < spec.sizes.size(); ++i)
    if (!spec.dynamic(i) && now.sizes[i] != spec.sizes[i])
      return expectedGot("size of dim " + std::to_string(i), std::to_string(spec.sizes[i]), std::to_string(now.sizes[i]));
  std::string strides = stridesMismatch(spec, now.sizes.data(), now.strides.data());
  if (!strides.empty()) return strides + " of " + what;
  if (now.dispatch_keys != spec.dispatch_keys)
    return expectedGot("dispatch keys", detail::dispatchKeysText(spec.dispatch_keys),
                       detail::dispatchKeysText(now.dispatch_keys));
  return "";
}

std::string describeTensorSpec(const TensorSpec& spec) {
  std::ostringstream s;
  std::ostringstream size;
  size << "[";
  for (size_t i = 0; i < spec.sizes.size(); ++i) {
    size << (i ? ", " : "");
    if (spec.dynamic(i))
      size << "*";
    else
      size << spec.sizes[i];
  }
  size << "]";
  s << reinterpret_cast<PyTypeObject*>(spec.type.get())->tp_name << "(dtype=" << reprOf(spec.dtype.get())
    << ", device=" << reprOf(spec.device.get()) << ", size=" << size.str()
    << ", stride=" << (spec.dynamic_mask ? std::string("contiguous") : intsText(spec.strides))
    << ", requires_grad=" << (spec.requires_grad ? "True" : "False") << ")";
  return s.str();
}

}  // namespace cdynamo::guards
