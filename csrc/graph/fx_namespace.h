// torch.fx.graph._Namespace in C++: the unique names FX gives nodes and the globals of
// generated code. Used by the code generator (a fresh namespace per python_code, as FX's)
// and by buildGraphModule, which names a graph's nodes as torch._dynamo's growing graph
// would have named them (graph_module.cpp).
#pragma once
#include <Python.h>

#include <cctype>
#include <cstdlib>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "support/pyref.h"

namespace cdynamo::graph {

inline bool fxLegalChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// _name_regex = ^([a-zA-Z_][0-9a-zA-Z_]*?)(?:_(\d+))?$ ; the lazy base ends where the rest
// is "_<digits>", i.e. at the last '_' when only digits (at least one) follow it and the
// base is not empty.
inline bool fxMatchName(const std::string& s, std::string* base, std::string* digits) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  for (char c : s)
    if (!fxLegalChar(c)) return false;
  digits->clear();
  *base = s;
  for (size_t i = s.size() - 1; i > 0; --i) {
    if (s[i] == '_') {
      if (i + 1 < s.size()) {
        *base = s.substr(0, i);
        *digits = s.substr(i + 1);
      }
      break;
    }
    if (!std::isdigit(static_cast<unsigned char>(s[i]))) break;
  }
  return true;
}

class FxNamespace {
 public:
  // `illegal`: torch.fx.graph._illegal_names (borrowed; lives as long as torch.fx).
  explicit FxNamespace(PyObject* illegal) : illegal_(illegal) {}

  const std::string* nameOf(PyObject* obj) const {
    auto it = obj_to_name_.find(obj);
    return it == obj_to_name_.end() ? nullptr : &it->second;
  }

  // _Namespace.create_name(candidate, obj) into *out. False when it cannot be made here:
  // with a Python error set (the illegal-names lookup failed), or without one (a suffix
  // beyond 64 bits, which FX itself handles).
  bool create(std::string candidate, PyObject* obj, std::string* out) {
    if (obj) {
      auto it = obj_to_name_.find(obj);
      if (it != obj_to_name_.end()) {
        *out = it->second;
        return true;
      }
    }
    std::string base, digits;
    if (!fxMatchName(candidate, &base, &digits)) {
      // _illegal_char_regex.sub("_", candidate): each run of illegal characters -> "_"
      // (a non-ASCII character is all bytes >= 0x80 in UTF-8, so a run of them is one run)
      std::string s;
      bool run = false;
      for (char c : candidate) {
        if (fxLegalChar(c)) {
          s += c;
          run = false;
        } else if (!run) {
          s += '_';
          run = true;
        }
      }
      if (s.empty()) s = "_unnamed";
      if (std::isdigit(static_cast<unsigned char>(s[0]))) s = "_" + s;
      candidate = s;
      if (!fxMatchName(candidate, &base, &digits)) return false;
    }
    long long num = 0;
    if (digits.empty() || used_.count(candidate)) {
      auto bc = base_count_.find(base);
      num = bc == base_count_.end() ? 0 : bc->second;
      // `_illegal_names.get(candidate, obj) is not obj`
      Ref key = Ref::steal(PyUnicode_FromStringAndSize(candidate.data(), static_cast<Py_ssize_t>(candidate.size())));
      if (!key) return false;
      PyObject* v = PyDict_GetItemWithError(illegal_, key.get());
      if (!v && PyErr_Occurred()) return false;
      PyObject* me = obj ? obj : Py_None;
      if ((v ? v : me) != me) {
        ++num;
        candidate = base + "_" + std::to_string(num);
      }
    } else {
      if (digits.size() > 17) return false;
      num = std::strtoll(digits.c_str(), nullptr, 10);
    }
    while (used_.count(candidate)) {
      ++num;
      candidate = base + "_" + std::to_string(num);
    }
    used_.insert(candidate);
    base_count_[base] = num;
    if (obj) obj_to_name_.emplace(obj, candidate);
    *out = candidate;
    return true;
  }

  const std::unordered_set<std::string>& used() const { return used_; }
  const std::unordered_map<std::string, long long>& baseCounts() const { return base_count_; }

 private:
  PyObject* illegal_;
  std::unordered_set<std::string> used_;
  std::unordered_map<std::string, long long> base_count_;
  std::unordered_map<PyObject*, std::string> obj_to_name_;
};

}  // namespace cdynamo::graph
