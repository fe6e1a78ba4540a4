// Calls of a container's methods (list.append, dict.get, set.add, ...): the C method's
// signature checked first, as Python checks it, then the kind family's method.
#include <algorithm>
#include <cstring>
#include <string>
#include <unordered_map>

#include "support/check.h"
#include "support/lookup.h"
#include "support/python_class.h"
#include "support/torch_types.h"
#include "trace/engine/scalars.h"
#include "trace/kinds/dict.h"
#include "trace/kinds/iterator.h"
#include "trace/kinds/object.h"
#include "trace/kinds/sequence.h"
#include "trace/kinds/set.h"
#include "trace/protocol/calls.h"
#include "trace/protocol/container_methods.h"
#include "trace/protocol/operators.h"
#include "trace/tracer.h"

namespace cdynamo::trace {

using bytecode::BinaryOp;
using bytecode::Op;

PyTypeObject* containerCType(const ValuePtr& self) {
  PyTypeObject* type = nullptr;
  if (const List* l = self->get<List>())
    type = l->deque ? reinterpret_cast<PyTypeObject*>(l->deque.get()) : &PyList_Type;
  else if (self->is(Kind::Tuple))
    type = &PyTuple_Type;
  else if (const Dict* d = self->get<Dict>())
    type = PyType_Check(d->type.get()) ? reinterpret_cast<PyTypeObject*>(d->type.get()) : &PyDict_Type;
  else if (const Set* s = self->get<Set>())
    type = s->frozen ? &PyFrozenSet_Type : &PySet_Type;
  while (type && isPythonClass(type)) type = type->tp_base;  // to the C container type
  return type;
}

namespace {

// What a C method's __text_signature__ says of the arguments it takes; `known` false when
// it has none (D.update([E, ]**F), set.union(*others) as documented in prose).
struct Arity {
  bool known = false;
  size_t min = 0, max = 0;  // positional arguments
  bool varargs = false;     // *args: any number past max
  bool keywords = false;    // some parameter can be passed by keyword
  // The positional parameters in order; keyword_from: the first one that may also be
  // passed by keyword (those after "/").
  std::vector<std::string> names;
  size_t keyword_from = SIZE_MAX;
};

Arity parseTextSignature(const char* sig) {
  // "($self, key, default=<unrepresentable>, /)", "($self, /, *, key=None, reverse=False)"
  Arity a;
  std::string s(sig);
  if (s.size() < 2 || s.front() != '(' || s.back() != ')') return a;
  s = s.substr(1, s.size() - 2);
  size_t pos = 0;
  bool keyword_only = false;
  std::vector<std::pair<std::string, bool>> params;  // (name, has default), before "/"
  bool after_slash = false;
  while (pos <= s.size()) {
    size_t comma = s.find(", ", pos);
    std::string p = s.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    pos = comma == std::string::npos ? s.size() + 1 : comma + 2;
    if (p.empty() || p[0] == '$') continue;
    if (p == "/") {
      after_slash = true;
      continue;
    }
    if (p == "*") {
      keyword_only = true;
      continue;
    }
    if (p.rfind("**", 0) == 0) {
      a.keywords = true;
      continue;
    }
    if (p[0] == '*') {
      a.varargs = true;
      keyword_only = true;
      continue;
    }
    bool has_default = p.find('=') != std::string::npos;
    if (keyword_only) {
      a.keywords = true;
      if (!has_default) return Arity{};  // a required keyword: leave it to the handlers
      continue;
    }
    if (after_slash) {
      a.keywords = true;
      a.keyword_from = std::min(a.keyword_from, a.max);
    }
    a.names.push_back(p.substr(0, p.find('=')));
    a.max += 1;
    if (!has_default) a.min = a.max;
  }
  a.known = true;
  return a;
}

Arity methodArity(PyTypeObject* type, PyObject* name) {
  // Per (type, method name), parsed once: the types are CPython's own (never freed).
  static std::unordered_map<std::string, Arity> cache;
  std::string key = std::string(type->tp_name) + "." + PyUnicode_AsUTF8(name);
  auto found = cache.find(key);
  if (found != cache.end()) return found->second;
  Arity a;
  PyObject* descr = _PyType_Lookup(type, name);  // borrowed; runs no Python code
  if (descr && (Py_IS_TYPE(descr, &PyMethodDescr_Type) || Py_IS_TYPE(descr, &PyWrapperDescr_Type))) {
    Ref sig = Ref::steal(PyObject_GetAttrString(descr, "__text_signature__"));
    if (sig && PyUnicode_Check(sig.get())) a = parseTextSignature(PyUnicode_AsUTF8(sig.get()));
    PyErr_Clear();
  }
  if (!a.known && descr && Py_IS_TYPE(descr, &PyMethodDescr_Type)) {
    // No signature: the calling convention still says (dict.keys, set.add, set.union).
    int flags = reinterpret_cast<PyMethodDescrObject*>(descr)->d_method->ml_flags &
                (METH_VARARGS | METH_KEYWORDS | METH_NOARGS | METH_O | METH_FASTCALL | METH_METHOD);
    if (flags == METH_NOARGS) {
      a.known = true;
    } else if (flags == METH_O) {
      a.known = true;
      a.min = a.max = 1;
    } else if (flags == METH_VARARGS) {
      a.known = true;
      a.varargs = true;
    }
  }
  cache.emplace(std::move(key), a);
  return a;
}

// A call of a container's C method with arguments its signature refuses raises Python's
// own TypeError (the method is called for real, with placeholders, on an empty instance
// of its type: argument parsing fails before the method does anything); NotHandled when
// the arguments fit, or the signature is not known.
Result<ValuePtr> raiseOnBadArity(Tracer& t, const ValuePtr& self, PyObject* name, const std::vector<ValuePtr>& args,
                                 const std::vector<std::pair<Ref, ValuePtr>>& kwargs) {
  PyTypeObject* type = containerCType(self);
  if (!type) return notHandled();
  Arity a = methodArity(type, name);
  if (!a.known) return notHandled();
  bool bad = args.size() < a.min || (!a.varargs && args.size() > a.max) || (!kwargs.empty() && !a.keywords);
  if (!bad) return notHandled();
  return raiseArgumentError(t, type, name, args, kwargs);
}

}  // namespace
Result<ValuePtr> raiseArgumentError(Tracer& t, PyTypeObject* type, PyObject* name, const std::vector<ValuePtr>& args,
                                    const std::vector<std::pair<Ref, ValuePtr>>& kwargs) {
  Ref instance;
  if (type == &PyDictProxy_Type) {
    Ref empty = Ref::steal(PyDict_New());
    if (empty) instance = Ref::steal(PyDictProxy_New(empty.get()));
  } else {
    instance = Ref::steal(PyObject_CallNoArgs(reinterpret_cast<PyObject*>(type)));
  }
  if (!instance) return t.failFromPython("making an empty container to check a call's arguments");
  // The descriptor called with the instance first, as a method call does (the message
  // then names it "set.union()", as Python's).
  Ref method = Ref::borrow(_PyType_Lookup(type, name));
  if (!method) method = Ref::steal(PyObject_GetAttr(reinterpret_cast<PyObject*>(type), name));
  Ref pos = Ref::steal(PyTuple_New(static_cast<Py_ssize_t>(args.size() + 1)));
  Ref kw = Ref::steal(PyDict_New());
  if (!method || !pos || !kw) return t.failFromPython("checking a call's arguments");
  PyTuple_SET_ITEM(pos.get(), 0, Py_NewRef(instance.get()));
  for (size_t i = 0; i < args.size(); ++i) PyTuple_SET_ITEM(pos.get(), static_cast<Py_ssize_t>(i + 1), Py_NewRef(Py_None));
  for (const auto& [k, v] : kwargs)
    if (PyDict_SetItem(kw.get(), k.get(), Py_None) < 0) return t.failFromPython("checking a call's arguments");
  Ref r = Ref::steal(PyObject_Call(method.get(), pos.get(), kwargs.empty() ? nullptr : kw.get()));
  if (r) return t.fail(std::string("the arguments of ") + type->tp_name + "." + PyUnicode_AsUTF8(name) +
                       "() do not match its signature, yet it accepted them");
  if (!PyErr_ExceptionMatches(PyExc_TypeError))
    return t.failFromPython("checking a call's arguments");
  return t.raisePython();
}

namespace {
// Keyword arguments of a C method that its signature lets pass by position
// (od.move_to_end(k, last=False), od.popitem(last=False)) moved into `args`, when they fill
// the positions right after the positional ones; the others stay in `kwargs`.
void keywordsToPositions(const ValuePtr& self, PyObject* name, std::vector<ValuePtr>& args,
                         std::vector<std::pair<Ref, ValuePtr>>& kwargs) {
  PyTypeObject* type = containerCType(self);
  if (!type || kwargs.empty()) return;
  Arity a = methodArity(type, name);
  if (!a.known) return;
  for (size_t i = args.size(); i < a.names.size() && i >= a.keyword_from && !kwargs.empty(); ++i) {
    auto found = std::find_if(kwargs.begin(), kwargs.end(), [&](const std::pair<Ref, ValuePtr>& kw) {
      return PyUnicode_Check(kw.first.get()) && a.names[i] == PyUnicode_AsUTF8(kw.first.get());
    });
    if (found == kwargs.end()) return;
    args.push_back(found->second);
    kwargs.erase(found);
  }
}

}  // namespace

Stop raiseConstructorArgumentError(Tracer& t, PyObject* type, size_t nargs, const Kwargs& kwargs) {
  Ref pos = Ref::steal(PyTuple_New(static_cast<Py_ssize_t>(nargs)));
  Ref kw = Ref::steal(PyDict_New());
  if (!pos || !kw) return t.failFromPython("checking a call's arguments");
  for (size_t i = 0; i < nargs; ++i) PyTuple_SET_ITEM(pos.get(), static_cast<Py_ssize_t>(i), Py_NewRef(Py_None));
  for (const auto& [k, v] : kwargs)
    if (PyDict_SetItem(kw.get(), k.get(), Py_None) < 0) return t.failFromPython("checking a call's arguments");
  Ref r = Ref::steal(PyObject_Call(type, pos.get(), kwargs.empty() ? nullptr : kw.get()));
  if (r || !PyErr_ExceptionMatches(PyExc_TypeError)) {
    PyErr_Clear();
    return t.fail("a container type accepted arguments it was expected to refuse");
  }
  return t.raisePython();
}

Result<ValuePtr> callContainerMethod(Tracer& t, const ValuePtr& self, PyObject* name, std::vector<ValuePtr>& args,
                                     std::vector<std::pair<Ref, ValuePtr>>& kwargs) {
  if (Result<ValuePtr> r = raiseOnBadArity(t, self, name, args, kwargs); !r.notHandled()) return r;
  return applyContainerMethod(t, self, name, args, kwargs);
}

Result<ValuePtr> applyContainerMethod(Tracer& t, const ValuePtr& self, PyObject* name, std::vector<ValuePtr>& args,
                                      std::vector<std::pair<Ref, ValuePtr>>& kwargs) {
  const char* n = PyUnicode_AsUTF8(name);
  auto is = [n](const char* m) { return strcmp(n, m) == 0; };
  if (self->is(Kind::Dict)) keywordsToPositions(self, name, args, kwargs);
  if (!kwargs.empty() && !(self->is(Kind::List) && is("sort")) && !(self->is(Kind::Dict) && is("update")) &&
      !(self->is(Kind::Tuple) && is("_replace")))
    return t.fail(std::string("keyword arguments to .") + n + "() are not supported yet");
  Result<ValuePtr> r = notHandled();
  switch (self->kind()) {
    case Kind::Tuple:
      r = namedTupleMethod(t, self, n, kwargs);
      if (r.notHandled()) r = sequenceMethod(t, self, n, args, kwargs);
      break;
    case Kind::List:
      r = dequeMethod(t, self, n, args);
      if (r.notHandled()) r = sequenceMethod(t, self, n, args, kwargs);
      break;
    case Kind::Dict:
      r = dictMethod(t, self, n, args, kwargs);
      break;
    case Kind::Set:
      r = setMethod(t, self, n, args);
      break;
    case Kind::DictView:
      // A keys view is set-like: isdisjoint() as a set of its keys answers it (an items
      // view's values need not be hashable, which a set of its pairs would require).
      if (self->as<DictView>().which == DictView::Keys && strcmp(n, "isdisjoint") == 0 && args.size() == 1 &&
          kwargs.empty()) {
        Result<ValuePtr> keys = makeSetPart(t, self, false);
        if (!keys) return keys;
        r = setMethod(t, *keys, n, args);
      }
      break;
    case Kind::Null:
    case Kind::Tensor:
    case Kind::Constant:
    case Kind::Slice:
    case Kind::Iterator:
    case Kind::Callable:
    case Kind::BoundMethod:
    case Kind::NamedMethod:
    case Kind::Module:
    case Kind::PyModule:
    case Kind::Cell:
    case Kind::Function:
    case Kind::Object:
    case Kind::NewObject:
    case Kind::Super:
    case Kind::Partial:
    case Kind::Context:
    case Kind::Namespace:
    case Kind::NdArray:
    case Kind::SubclassTensor:
      break;
  }
  if (!r.notHandled()) return r;
  if (n[0] == '_' && n[1] == '_' && (self->is(Kind::List) || self->is(Kind::Tuple) || self->is(Kind::Dict) ||
                                     self->is(Kind::Set))) {
    // A special method called by name (l.__getitem__(2), d.__iter__(), s.__sub__(q)): the
    // C type's method, as a call through the class would run it (callBaseMethod).
    if (PyTypeObject* type = containerCType(self))
      if (PyObject* descr = _PyType_Lookup(type, name)) {
        Ref hold = Ref::borrow(descr);
        Args with_self{self};
        with_self.insert(with_self.end(), args.begin(), args.end());
        Result<ValuePtr> b = callBaseMethod(t, descr, with_self, kwargs);
        if (!b.notHandled()) return b;
      }
  }
  if (self->is(Kind::DictView) && strcmp(n, "__iter__") == 0 && args.empty() && kwargs.empty()) return getIter(t, self);
  if (self->is(Kind::Iterator) && args.empty() && kwargs.empty()) {
    if (strcmp(n, "__iter__") == 0) return self;  // an iterator is its own
    if (strcmp(n, "__next__") == 0) {
      ValuePtr item;
      if (Done d = nextItem(t, self, &item); !d) return d.stop();
      if (!item) return raiseStopIteration(t, self);
      return item;
    }
  }
  return t.fail(std::string(kindName(self->kind())) + "." + n + "() is not supported yet");
}

namespace {

}  // namespace
// Calls method `name` of container `self` with one argument, for an opcode.
Done containerCall(Tracer& t, const ValuePtr& self, Str name, const ValuePtr& arg) {
  Args a{arg};
  Kwargs kw;
  return outcomeOf(applyContainerMethod(t, self, interned(name), a, kw));
}

}  // namespace cdynamo::trace
