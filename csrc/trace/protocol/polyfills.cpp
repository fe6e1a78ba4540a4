// Polyfills: callables with a Python version in cdynamo's polyfill registry (itertools,
// functools, operator, some torch bindings) inlined in their place, and functools caches.
#include <algorithm>
#include <cstring>
#include <string>
#include <unordered_map>

#include "support/lookup.h"
#include "support/torch_types.h"
#include "trace/call_rules.h"
#include "trace/engine/scalars.h"
#include "trace/kinds/iterator.h"
#include "trace/kinds/object.h"
#include "trace/protocol/call_rules_internal.h"
#include "trace/protocol/callables.h"
#include "trace/protocol/calls.h"
#include "trace/tracer.h"

namespace cdynamo::trace {

using graph::NodeOp;

namespace {
// A call without arguments of an lru_cache wrapper of a function without parameters whose
// cache holds its result (the one key such a call has): eagerly a cache hit, which runs
// nothing. When that result is a constant the call is that constant, guarded that the cache
// still holds it (a cache_clear() makes the next call run the function, traced then). As
// torch's `is_fx_tracing_warning()` (a log call, cached after its first run).
Result<ValuePtr> cachedResult(Tracer& t, PyObject* f, PyObject* wrapped, Args& args, Kwargs& kwargs) {
  if (!args.empty() || !kwargs.empty() || !PyFunction_Check(wrapped)) return notHandled();
  auto* co = reinterpret_cast<PyCodeObject*>(PyFunction_GET_CODE(wrapped));
  if (co->co_argcount != 0 || co->co_kwonlyargcount != 0 || (co->co_flags & (CO_VARARGS | CO_VARKEYWORDS)))
    return notHandled();
  PyObject* holds = lookup(Obj::cdynamo_lru_cache_holds);
  if (!holds) return t.failFromPython("cdynamo._internal.polyfills.functools.lru_cache_holds");
  Ref probe_args = Ref::steal(PyTuple_Pack(1, f));
  Ref held = probe_args ? Ref::steal(PyObject_Call(holds, probe_args.get(), nullptr)) : Ref();
  if (!held) return t.failFromPython("an lru_cache's cache_info()");
  if (held.get() != Py_True) return notHandled();
  Ref result = Ref::steal(PyObject_CallNoArgs(f));  // a hit: nothing of the program runs
  if (!result) return t.raisePython();
  if (!isConstantObject(result.get())) return notHandled();
  t.guards().checkStateQuery(holds, probe_args.get(), nullptr, Py_True);
  return Value::constant(result.get());
}


}  // namespace
Result<ValuePtr> callPolyfill(Tracer& t, PyObject* f, Args& args, Kwargs& kwargs) {
  PyObject* table = lookup(Obj::cdynamo_polyfills);
  if (!table || !PyDict_Check(table)) return t.failFromPython("cdynamo._internal.polyfills");
  // C callables only: hashed by identity.
  if (!PyCFunction_Check(f) && !PyType_Check(f) && !PyObject_TypeCheck(f, &PyMethodDescr_Type)) return notHandled();
  PyObject* poly = PyDict_GetItemWithError(table, f);
  if (!poly) {
    PyErr_Clear();
    return notHandled();
  }
  std::vector<PyObject*>& running = t.polyfillsRunning();
  if (std::find(running.begin(), running.end(), f) != running.end()) return notHandled();  // the original
  if (PyType_Check(poly) && PyType_Check(f)) {
    // An iterator that may never end (itertools.count): an instance of the polyfill class,
    // stepped one item at a time through its __next__, standing for an iterator of f's type.
    Result<ValuePtr> obj = newObject(t, poly, std::move(args), std::move(kwargs));
    if (!obj) return obj;
    ValuePtr it = Value::iterator({}, f);
    it->as<Iterator>().stepper = obj.take();
    return it;
  }
  if (!PyFunction_Check(poly)) return t.fail("a polyfill that is not a Python function");
  running.push_back(f);
  Result<ValuePtr> r = t.inlineFunction(poly, -1, std::move(args), std::move(kwargs));
  t.polyfillsRunning().pop_back();
  if (!r) return r;
  if (Iterator* it = (*r)->get<Iterator>(); it && it->type.get() == reinterpret_cast<PyObject*>(&PyGen_Type)) {
    PyObject* owner = PyCFunction_Check(f) ? PyCFunction_GET_SELF(f) : nullptr;
    PyObject* type = PyType_Check(f) ? f : (owner && PyType_Check(owner)) ? owner : nullptr;
    if (type) it->type = Ref::borrow(type);
  }
  return r;
}

PyObject* polyfillRebuild(PyObject* type) {
  if (!type || !PyType_Check(type)) return nullptr;
  PyObject* table = lookup(Obj::cdynamo_polyfills);
  if (!table || !PyDict_Check(table)) return nullptr;
  PyObject* poly = PyDict_GetItemWithError(table, type);  // borrowed
  if (!poly || !PyType_Check(poly)) return nullptr;
  Ref rebuild = Ref::steal(PyObject_GetAttrString(poly, "rebuild"));
  // The class keeps the function alive (through its staticmethod): borrowed from there.
  return rebuild ? rebuild.get() : nullptr;
}

bool isCacheWrapper(PyObject* f) {
  PyObject* type = lookup(Obj::functools_lru_cache_wrapper);
  if (!type) {
    PyErr_Clear();
    return false;
  }
  return reinterpret_cast<PyObject*>(Py_TYPE(f)) == type;
}

// A functools.lru_cache/cache wrapper called: the function it wraps is inlined, skipping
// the cache (as TorchDynamo does, with the same warning): the traced call computes what a
// cache miss would. The wrapped function is read through the wrapper (guarded).
Result<ValuePtr> callCacheWrapper(Tracer& t, const ValuePtr& fn, Args& args, Kwargs& kwargs) {
  PyObject* f = fn->real();
  static PyObject* wrapped_name = PyUnicode_InternFromString("__wrapped__");
  if (!wrapped_name) return t.failFromPython("__wrapped__");
  Ref wrapped = Ref::steal(PyObject_GetAttr(f, wrapped_name));
  if (!wrapped) return t.failFromPython("the function an lru_cache wraps");
  if (Result<ValuePtr> hit = cachedResult(t, f, wrapped.get(), args, kwargs); !hit.notHandled()) return hit;
  if (PyErr_WarnEx(PyExc_UserWarning,
                   "Dynamo detected a call to a `functools.lru_cache`-wrapped function. Dynamo ignores the cache "
                   "wrapper and directly traces the wrapped function. Silent incorrectness is only a *potential* "
                   "risk, not something we have observed.",
                   1) < 0)
    return t.failFromPython("the lru_cache warning");
  int reg = fn->reg >= 0 ? t.load(guards::LoadKind::Attr, fn->reg, 0, wrapped_name, t.guards().sourceName(fn->reg) + ".__wrapped__")
                         : -1;
  Result<ValuePtr> target = t.wrap(wrapped.get(), reg);
  if (!target) return target;
  return call(t, *target, std::move(args), std::move(kwargs));
}

}  // namespace cdynamo::trace
