// Iteration: iter() of every kind (GET_ITER, FOR_ITER's source) and the items an iterable
// value gives.
#include <cstring>
#include <string>

#include "support/lookup.h"
#include "support/torch_types.h"
#include "trace/engine/scalars.h"
#include "trace/kinds/dict.h"
#include "trace/kinds/iterator.h"
#include "trace/kinds/module.h"
#include "trace/kinds/object.h"
#include "trace/kinds/set.h"
#include "trace/protocol/constants.h"
#include "trace/protocol/operators.h"
#include "trace/tracer.h"

namespace cdynamo::trace {

using bytecode::BinaryOp;
using graph::NodeOp;

Result<ValuePtr> getIter(Tracer& t, const ValuePtr& obj) {
  switch (obj->kind()) {
    case Kind::Iterator:
      return obj;
    case Kind::Object:
    case Kind::NewObject: {
      Result<ValuePtr> r = callDunder(t, obj, interned(Str::dunder_iter), {});
      if (r.notHandled()) {
        PyObject* real = obj->real();
        if (real && PyUnicode_Check(real) && Py_TYPE(real)->tp_iter == PyUnicode_Type.tp_iter) {
          // An instance of a str subclass that keeps str's iteration (torch.__version__, a
          // TorchVersion): its characters, which never change; one from the program is
          // guarded by identity, its type alone does not fix them.
          if (obj->reg >= 0) t.guards().checkIdentity(obj->reg, real);
          std::vector<ValuePtr> chars;
          for (Py_ssize_t i = 0; i < PyUnicode_GET_LENGTH(real); ++i) {
            Ref c = Ref::steal(PyUnicode_Substring(real, i, i + 1));
            if (!c) return t.failFromPython("iterating a str");
            chars.push_back(Value::constant(c.get()));
          }
          Ref str_iter = Ref::steal(PyObject_GetIter(Ref::steal(PyUnicode_FromString("")).get()));
          if (!str_iter) return t.failFromPython("iterating a str");
          return Value::iterator(std::move(chars), reinterpret_cast<PyObject*>(Py_TYPE(str_iter.get())));
        }
        if (real && Py_TYPE(real)->tp_iter)  // a C type's own iteration (deque, array, ...)
          return t.fail(std::string("iter() of a ") + Py_TYPE(real)->tp_name + " object (a C type's own iterator) is not modelled");
        return t.fail("object is not iterable (TypeError)");
      }
      if (!r) return r;
      // What __iter__ returned is the iterator, never asked for its own __iter__: a user
      // object gives its items through its __next__, one at a time.
      if ((*r)->is(Kind::Iterator)) return r;
      if (isUserObject(*r)) {
        ValuePtr it = Value::iterator({}, typeOf(t, *r));
        it->as<Iterator>().stepper = r.take();
        return it;
      }
      return t.fail(std::string("__iter__ returned ") + describe(*r) + " (TypeError: iter() returned non-iterator)");
    }
    case Kind::Tuple:
      return Value::iterator(*obj->elements(), iteratorTypeFor(t, lookup(Obj::builtins_iter), obj));
    case Kind::List:
      // Lists, dicts and sets are read item by item as they are when each is taken
      // (value.h Iterator::Made::Sequence): the program may change them in between.
      return sequenceIterator(obj, *obj->elements(), iteratorTypeFor(t, lookup(Obj::builtins_iter), obj), 0, false);
    case Kind::Set:
      return sequenceIterator(obj, setIterationOrder(obj->as<Set>()),
                              iteratorTypeFor(t, lookup(Obj::builtins_iter), obj), 0, false);
    case Kind::Dict: {
      std::vector<ValuePtr> keys;
      for (const Ref& k : obj->as<Dict>().keys) {
        Result<ValuePtr> kv = keyValueOf(t, k.get());
        if (!kv) return kv;
        keys.push_back(kv.take());
      }
      return sequenceIterator(obj, std::move(keys), iteratorTypeFor(t, lookup(Obj::builtins_iter), obj),
                              DictView::Keys, false);
    }
    case Kind::Constant: {
      Ref iter = Ref::steal(PyObject_GetIter(obj->constant()));
      // iter(1), for x in None: the TypeError Python raises, raised in the traced program.
      if (!iter) return PyErr_ExceptionMatches(PyExc_TypeError) ? t.raisePython() : t.failFromPython("iterating a constant");
      std::vector<ValuePtr> items;
      while (Ref item = Ref::steal(PyIter_Next(iter.get()))) {
        if (!isConstantObject(item.get())) return t.fail("iterating a constant gave a non-constant");
        items.push_back(Value::constant(item.get()));
      }
      if (PyErr_Occurred()) return t.failFromPython("iterating a constant");
      return Value::iterator(std::move(items), reinterpret_cast<PyObject*>(Py_TYPE(iter.get())));
    }
    case Kind::Module:
      return moduleIter(t, obj);
    case Kind::DictView: {
      // What the dict holds now.
      const DictView& view = obj->as<DictView>();
      const Dict& d = view.dict->as<Dict>();
      std::vector<ValuePtr> items;
      for (size_t i = 0; i < d.keys.size(); ++i) {
        if (view.which == DictView::Values) {
          items.push_back(d.values[i]);
          continue;
        }
        Result<ValuePtr> kv = keyValueOf(t, d.keys[i].get());
        if (!kv) return kv;
        if (view.which == DictView::Keys) items.push_back(kv.take());
        else items.push_back(Value::tuple({kv.take(), d.values[i]}));
      }
      return sequenceIterator(view.dict, std::move(items), iteratorTypeFor(t, lookup(Obj::builtins_iter), obj),
                              view.which, false);
    }
    case Kind::Null:
    case Kind::Tensor:
    case Kind::Slice:
    case Kind::Callable:
    case Kind::BoundMethod:
    case Kind::NamedMethod:
    case Kind::PyModule:
    case Kind::Cell:
    case Kind::Function:
    case Kind::Super:
    case Kind::Partial:
    case Kind::Context:
    case Kind::Namespace:
    case Kind::NdArray:
    case Kind::SubclassTensor:
      break;
  }
  return t.fail(std::string("iterating ") + describe(obj) + " is not supported yet");
}

Done iterate(Tracer& t, const ValuePtr& v, std::vector<ValuePtr>* out) {
  if (Done d = peekItems(t, v, out); !d) return d;
  if (const Iterator* it = v->get<Iterator>())
    return t.iterators().advance(v, it->items.size(), true);  // consuming it exhausts it
  return {};
}

Done peekItems(Tracer& t, const ValuePtr& v, std::vector<ValuePtr>* out) {
  if (Done d = t.iterators().usable(v.get()); !d) return d;
  Result<ValuePtr> got = getIter(t, v);
  if (!got) return got.stop();
  if (Done d = drainUserIterator(t, *got); !d) return d;
  if (Done d = dequeUnchanged(t, *got); !d) return d;
  const Iterator& it = (*got)->as<Iterator>();
  out->assign(it.items.begin() + static_cast<std::ptrdiff_t>(std::min(it.pos, it.items.size())), it.items.end());
  return {};
}

}  // namespace cdynamo::trace
