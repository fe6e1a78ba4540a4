// Tensor subclasses with __torch_function__ (Kind::SubclassTensor): what torch's override
// dispatch does, traced.
//
// Eagerly, a torch function, Tensor method, tensor operator or tensor property applied to
// an instance of a torch.Tensor subclass calls the subclass's __torch_function__(func,
// types, args, kwargs) (torch.overrides: the overloaded arguments, subclasses before their
// bases, each class asked in turn until one does not return NotImplemented). Here that
// call is inlined like user code: whatever it does (logging into a list, reading a closure
// or a global) is traced and guarded. torch.Tensor.__torch_function__ (what
// super().__torch_function__ reaches, and a subclass's default) runs `func` with subclass
// dispatch off, which the trace does on the plain tensors (the graph's nodes), and converts
// tensor results to the subclass as torch's _convert does. The graph so holds plain tensor
// ops only; the subclass objects are rebuilt where values leave the trace (outputs.cpp).
#include <cstring>
#include <string>
#include <unordered_set>

#include "support/lookup.h"
#include "support/torch_types.h"
#include "trace/engine/outputs.h"
#include "trace/engine/graph_calls.h"
#include "trace/engine/scalars.h"
#include "trace/kinds/object.h"
#include "trace/kinds/tensor_subclass.h"
#include "trace/protocol/attributes.h"
#include "trace/protocol/binary_rules.h"
#include "trace/protocol/calls.h"
#include "trace/protocol/operators.h"
#include "trace/tracer.h"
#include "support/type_dict.h"

namespace cdynamo::trace {

namespace {

PyTypeObject* tensorType() { return reinterpret_cast<PyTypeObject*>(lookup(Obj::torch_Tensor)); }

PyObject* torchFunctionName() {
  static PyObject* const name = PyUnicode_InternFromString("__torch_function__");
  return name;
}

// torch.Tensor.__torch_function__'s function (under its classmethod), borrowed; null with
// an error set when torch cannot be read.
PyObject* defaultImplFunction() {
  static Ref& fn = *new Ref();  // Note [Python references in statics] (support/pyref.h)
  if (fn) return fn.get();
  PyTypeObject* tt = tensorType();
  if (!tt) return nullptr;
  PyObject* cm = PyDict_GetItemWithError(typeDict(tt), torchFunctionName());
  if (!cm) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "torch.Tensor has no __torch_function__");
    return nullptr;
  }
  fn = Ref::steal(PyObject_GetAttrString(cm, "__func__"));
  return fn.get();
}

// The class's __torch_function__ as found in its MRO (borrowed), or null.
PyObject* torchFunctionOf(PyObject* cls) {
  return _PyType_Lookup(reinterpret_cast<PyTypeObject*>(cls), torchFunctionName());
}

// A class whose __torch_function__ is torch._C._disabled_torch_function_impl takes no part
// in dispatch (nn.Parameter's way of behaving as a plain tensor).
bool dispatchDisabled(PyObject* cls) {
  PyObject* tf = torchFunctionOf(cls);
  PyObject* disabled = lookup(Obj::torch_C_disabled_torch_function_impl);
  if (!disabled) PyErr_Clear();
  return !tf || (disabled && tf == disabled);
}

// The overloaded classes among `relevant` (top-level values and the items of tuples and
// lists among them, as torch's argument parser looks at tensor lists), in torch's order:
// each class once, a subclass before any of its bases.
std::vector<PyObject*> overloadedTypes(const std::vector<ValuePtr>& relevant) {
  std::vector<PyObject*> types;
  auto consider = [&](const ValuePtr& v) {
    const SubclassTensor* s = v->get<SubclassTensor>();
    if (!s) return;
    PyObject* cls = s->cls.get();
    if (dispatchDisabled(cls)) return;
    for (PyObject* known : types)
      if (known == cls) return;
    auto pos = types.end();
    for (auto it = types.begin(); it != types.end(); ++it)
      if (PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(cls), reinterpret_cast<PyTypeObject*>(*it))) {
        pos = it;
        break;
      }
    types.insert(pos, cls);
  };
  for (const ValuePtr& v : relevant) {
    consider(v);
    if (v->is(Kind::Tuple) || v->is(Kind::List))
      for (const ValuePtr& item : *v->elements()) consider(item);
  }
  return types;
}

std::vector<ValuePtr> relevantOf(const Args& args, const Kwargs& kwargs) {
  std::vector<ValuePtr> all(args.begin(), args.end());
  for (const auto& kv : kwargs) all.push_back(kv.second);
  return all;
}

// A tensor property's getter as torch hands it to __torch_function__ (Tensor.shape.__get__):
// the name of the getset descriptor of torch's tensor class it is bound to, or null.
PyObject* propertyGetterName(PyObject* func) {
  if (strcmp(Py_TYPE(func)->tp_name, "method-wrapper") != 0) return nullptr;
  Ref self = Ref::steal(PyObject_GetAttrString(func, "__self__"));
  Ref name = self ? Ref::steal(PyObject_GetAttrString(func, "__name__")) : Ref();
  if (!self || !name) return PyErr_Clear(), nullptr;
  if (!Py_IS_TYPE(self.get(), &PyGetSetDescr_Type) || PyUnicode_CompareWithASCIIString(name.get(), "__get__") != 0)
    return nullptr;
  PyTypeObject* tt = tensorType();
  if (!tt || !PyType_IsSubtype(tt, PyDescr_TYPE(self.get()))) return PyErr_Clear(), nullptr;
  return PyDescr_NAME(self.get());
}

// Whether `f` is a method of torch's C tensor class (TensorBase.add, TensorBase.__getitem__).
bool isTensorMethodDescriptor(PyObject* f) {
  // A method, or a slot's wrapper (TensorBase.__getitem__).
  if (!PyObject_TypeCheck(f, &PyMethodDescr_Type) && !PyObject_TypeCheck(f, &PyWrapperDescr_Type)) return false;
  PyTypeObject* tt = tensorType();
  if (!tt) return PyErr_Clear(), false;
  return PyType_IsSubtype(tt, PyDescr_TYPE(f));
}

// Whether torch's argument parser hands `f` to __torch_function__ (torch.overrides'
// overridable functions: torch.add, F.relu, Tensor.add, ...), read once per process.
bool isOverridable(PyObject* f) {
  // Note [Python references in statics] (support/pyref.h): torch's callables live for the process.
  static auto& known = *new std::unordered_set<PyObject*>();
  static bool read = false;
  if (!read) {
    read = true;
    PyObject* get = lookup(Obj::torch_overrides_get_overridable_functions);
    Ref table = get ? Ref::steal(PyObject_CallNoArgs(get)) : Ref();
    Ref lists = table && PyDict_Check(table.get()) ? Ref::steal(PyDict_Values(table.get())) : Ref();
    for (Py_ssize_t i = 0; lists && i < PyList_GET_SIZE(lists.get()); ++i) {
      PyObject* fns = PyList_GET_ITEM(lists.get(), i);
      if (!PyList_Check(fns)) continue;
      for (Py_ssize_t j = 0; j < PyList_GET_SIZE(fns); ++j) {
        PyObject* fn = PyList_GET_ITEM(fns, j);
        Py_INCREF(fn);
        known.insert(fn);
      }
    }
    PyErr_Clear();
  }
  return known.count(f) != 0;
}

// An operator of torch.ops (torch.ops.aten.index, or one of its overloads): torch hands it
// to the modes on the stack too.
bool isOpsOperator(PyObject* f) {
  for (Obj o : {Obj::torch_ops_OpOverloadPacket, Obj::torch_ops_OpOverload}) {
    PyObject* cls = lookup(o);
    if (!cls) PyErr_Clear();
    if (cls && PyType_Check(cls) && PyObject_TypeCheck(f, reinterpret_cast<PyTypeObject*>(cls))) return true;
  }
  return false;
}

// The plain tensor of a subclass instance (the same node), and of a tuple or list of them.
ValuePtr stripped(const ValuePtr& v, std::vector<std::pair<ValuePtr, ValuePtr>>* originals) {
  if (const SubclassTensor* s = v->get<SubclassTensor>()) {
    ValuePtr plain = Value::tensor(s->node);
    originals->emplace_back(plain, v);
    return plain;
  }
  if ((v->is(Kind::Tuple) && !v->as<Tuple>().namedtuple) || v->is(Kind::List)) {
    bool any = false;
    for (const ValuePtr& item : *v->elements()) any = any || item->is(Kind::SubclassTensor);
    if (!any) return v;
    std::vector<ValuePtr> items;
    for (const ValuePtr& item : *v->elements()) items.push_back(stripped(item, originals));
    return Value::sequence(v->kind(), std::move(items));
  }
  return v;
}

// A result of a function run on the plain tensors: a tensor that is one of the arguments'
// very objects (x.add_(1) returns x) is that argument again, subclass and all.
ValuePtr restored(Tracer& t, const ValuePtr& v, const std::vector<std::pair<ValuePtr, ValuePtr>>& originals) {
  if (const Tensor* r = v->get<Tensor>()) {
    if (isScalarValue(t, v)) return v;
    PyObject* fake = t.graph().fake(r->node);
    for (const auto& [plain, original] : originals)
      if (plain == v || (fake && t.graph().fake(original->as<SubclassTensor>().node) == fake)) return original;
    return v;
  }
  if ((v->is(Kind::Tuple) && !v->as<Tuple>().attrs) || v->is(Kind::List)) {
    std::vector<ValuePtr> items;
    bool changed = false;
    for (const ValuePtr& item : *v->elements()) {
      items.push_back(restored(t, item, originals));
      changed = changed || items.back() != item;
    }
    if (!changed) return v;
    if (v->is(Kind::List)) return Value::list(std::move(items));
    return Value::of(Tuple{std::move(items), v->as<Tuple>().namedtuple.copy(), nullptr});
  }
  return v;
}

}  // namespace

bool anySubclassTensor(const Args& args, const Kwargs& kwargs) {
  auto has = [](const ValuePtr& v) {
    if (v->is(Kind::SubclassTensor)) return true;
    if (v->is(Kind::Tuple) || v->is(Kind::List))
      for (const ValuePtr& item : *v->elements())
        if (item->is(Kind::SubclassTensor)) return true;
    return false;
  };
  for (const ValuePtr& a : args)
    if (has(a)) return true;
  for (const auto& kv : kwargs)
    if (has(kv.second)) return true;
  return false;
}

bool takesPartInDispatch(const ValuePtr& v) {
  const SubclassTensor* s = v->get<SubclassTensor>();
  return s && !dispatchDisabled(s->cls.get());
}

Result<ValuePtr> runWithoutSubclassDispatch(Tracer& t, PyObject* func, Args args, Kwargs kwargs) {
  std::vector<std::pair<ValuePtr, ValuePtr>> originals;
  for (ValuePtr& a : args) a = stripped(a, &originals);
  for (auto& kv : kwargs) kv.second = stripped(kv.second, &originals);
  Result<ValuePtr> r = notHandled();
  if (PyObject* name = propertyGetterName(func)) {
    if (args.size() != 1 || !kwargs.empty()) return t.fail("a tensor property's getter called with other arguments");
    r = getAttr(t, args[0], name);
  } else if (isTensorMethodDescriptor(func) && !args.empty() && args[0]->is(Kind::Tensor) &&
             PyUnicode_CompareWithASCIIString(PyDescr_NAME(func), "as_subclass") == 0) {
    return tensorAsSubclass(t, args[0], Args(args.begin() + 1, args.end()), std::move(kwargs));  // a new object
  } else if (isTensorMethodDescriptor(func) && args.size() == 2 && kwargs.empty() &&
             PyUnicode_CompareWithASCIIString(PyDescr_NAME(func), "__getitem__") == 0) {
    r = subscript(t, args[0], args[1]);
  } else if (isTensorMethodDescriptor(func) && args.size() == 3 && kwargs.empty() &&
             PyUnicode_CompareWithASCIIString(PyDescr_NAME(func), "__setitem__") == 0) {
    PyObject* setitem = lookup(Obj::operator_setitem);
    if (!setitem) return t.failFromPython("operator.setitem");
    r = recordCall(t, graph::NodeOp::CallFunction, setitem, args, {});
  } else if (isTensorMethodDescriptor(func) && !args.empty() && args[0]->is(Kind::Tensor)) {
    // TensorBase.sigmoid(x): x's method of that name, as x.sigmoid().
    Result<ValuePtr> method = getAttr(t, args[0], PyDescr_NAME(func));
    if (!method) return method;
    r = call(t, *method, Args(args.begin() + 1, args.end()), std::move(kwargs));
  } else {
    r = call(t, Value::callable(func), std::move(args), std::move(kwargs));
  }
  if (!r) return r;
  return restored(t, r.take(), originals);
}

Result<ValuePtr> tensorAsSubclass(Tracer& t, const ValuePtr& self, Args args, Kwargs kwargs) {
  PyObject* cls = args.size() == 1 && kwargs.empty() ? args[0]->real() : nullptr;
  if (!cls || !PyType_Check(cls)) return t.fail("Tensor.as_subclass() of something other than a class");
  PyTypeObject* tt = tensorType();
  if (!tt) return t.failFromPython("torch.Tensor");
  if (!PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(cls), tt))
    return t.raiseNew(PyExc_TypeError, "Creating a new Tensor subclass " + std::string(reinterpret_cast<PyTypeObject*>(cls)->tp_name) +
                                           " but the supplied type is not a subclass of torch.Tensor");
  if (!subclassModelled(cls)) return t.fail(std::string("tensor subclass ") + reinterpret_cast<PyTypeObject*>(cls)->tp_name + " (with its own __torch_dispatch__) is not supported yet");
  int node = self->is(Kind::Tensor) ? self->as<Tensor>().node : self->as<SubclassTensor>().node;
  if (reinterpret_cast<PyTypeObject*>(cls) == tt) return Value::tensor(node);
  return Value::of(SubclassTensor{node, Ref::borrow(cls)});
}

bool subclassModelled(PyObject* cls) {
  // A subclass of its own __torch_dispatch__ (a wrapper subclass, traced by torch._dynamo
  // through AOTAutograd) is not this: its tensors are not their plain data.
  static PyObject* const dispatch_name = PyUnicode_InternFromString("__torch_dispatch__");
  PyTypeObject* tt = tensorType();
  if (!tt) return PyErr_Clear(), false;
  PyObject* own = _PyType_Lookup(reinterpret_cast<PyTypeObject*>(cls), dispatch_name);
  PyObject* base = _PyType_Lookup(tt, dispatch_name);
  PyObject* param = lookup(Obj::torch_nn_Parameter);
  if (!param) PyErr_Clear();
  // A subclass of nn.Parameter is a module's tensor with its own ways (not modelled).
  if (param && PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(cls), reinterpret_cast<PyTypeObject*>(param))) return false;
  return own == base;
}

bool wrapperSubclass(PyObject* cls) {
  static PyObject* const dispatch_name = PyUnicode_InternFromString("__torch_dispatch__");
  static PyObject* const flatten_name = PyUnicode_InternFromString("__tensor_flatten__");
  PyTypeObject* tt = tensorType();
  if (!tt) return PyErr_Clear(), false;
  if (!PyType_Check(cls) || !PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(cls), tt)) return false;
  PyObject* own = _PyType_Lookup(reinterpret_cast<PyTypeObject*>(cls), dispatch_name);
  return own && own != _PyType_Lookup(tt, dispatch_name) &&
         _PyType_Lookup(reinterpret_cast<PyTypeObject*>(cls), flatten_name) != nullptr;
}

bool wrapperSubclassModelled(PyObject* cls) {
  if (!wrapperSubclass(cls)) return false;
  PyObject* tf = torchFunctionOf(cls);
  PyObject* base = torchFunctionOf(reinterpret_cast<PyObject*>(tensorType()));
  PyObject* disabled = lookup(Obj::torch_C_disabled_torch_function_impl);
  if (!disabled) PyErr_Clear();
  return tf && (tf == base || (disabled && tf == disabled));
}

// torch.Tensor.__torch_function__(cls, func, types, args, kwargs): NotImplemented unless
// cls is a subclass of every type; else func run with subclass dispatch off and its tensor
// results made instances of cls (tuples and lists item by item), except for the functions
// torch leaves unwrapped (get_default_nowrap_functions: Tensor._base, Tensor.grad).
Result<ValuePtr> defaultTorchFunction(Tracer& t, PyObject* cls, Args& args, Kwargs& kwargs) {
  ValuePtr func, types, fargs, fkwargs;
  const char* const names[] = {"func", "types", "args", "kwargs"};
  ValuePtr* slots[] = {&func, &types, &fargs, &fkwargs};
  if (args.size() > 4) return t.raiseNew(PyExc_TypeError, "__torch_function__() takes at most 5 positional arguments");
  for (size_t i = 0; i < args.size(); ++i) *slots[i] = args[i];
  for (auto& [k, v] : kwargs) {
    bool found = false;
    for (size_t i = 0; i < 4; ++i)
      if (PyUnicode_CompareWithASCIIString(k.get(), names[i]) == 0) *slots[i] = v, found = true;
    if (!found) return t.raiseNew(PyExc_TypeError, "__torch_function__() got an unexpected keyword argument");
  }
  if (!func || !types) return t.raiseNew(PyExc_TypeError, "__torch_function__() missing required arguments");
  PyObject* f = func->real();
  if (!f) return t.fail("torch.Tensor.__torch_function__ of a function the trace cannot name");
  const std::vector<ValuePtr>* type_items = types->elements();
  std::vector<ValuePtr> type_values;
  if (PyObject* c = types->constant(); c && PyTuple_Check(c)) {
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(c); ++i) type_values.push_back(Value::constant(PyTuple_GET_ITEM(c, i)));
    type_items = &type_values;
  }
  if (!type_items || types->is(Kind::Iterator)) return t.fail("torch.Tensor.__torch_function__ with types that are not a tuple or list");
  for (const ValuePtr& ty : *type_items) {
    PyObject* c = ty->real();
    if (!c || !PyType_Check(c)) return t.fail("torch.Tensor.__torch_function__ with types that are not classes");
    if (!PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(cls), reinterpret_cast<PyTypeObject*>(c)))
      return Value::constant(Py_NotImplemented);
  }
  Args call_args;
  if (fargs) {
    if (const std::vector<ValuePtr>* items = fargs->elements(); items && !fargs->is(Kind::Iterator) && !fargs->is(Kind::Set))
      call_args = *items;
    else if (PyObject* c = fargs->constant(); c && PyTuple_Check(c))
      for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(c); ++i) call_args.push_back(Value::constant(PyTuple_GET_ITEM(c, i)));
    else
      return t.fail("torch.Tensor.__torch_function__ with args that are not a tuple or list");
  }
  Kwargs call_kwargs;
  if (fkwargs && !fkwargs->isNone()) {
    const Dict* d = fkwargs->get<Dict>();
    if (!d) return t.fail("torch.Tensor.__torch_function__ with kwargs that are not a dict");
    for (size_t i = 0; i < d->keys.size(); ++i) {
      if (!PyUnicode_Check(d->keys[i].get())) return t.raiseNew(PyExc_TypeError, "keywords must be strings");
      call_kwargs.emplace_back(d->keys[i].copy(), d->values[i]);
    }
  }
  Result<ValuePtr> r = runWithoutSubclassDispatch(t, f, std::move(call_args), std::move(call_kwargs));
  if (!r) return r;
  PyObject* nowrap_fn = lookup(Obj::torch_overrides_default_nowrap);
  Ref nowrap = nowrap_fn ? Ref::steal(PyObject_CallNoArgs(nowrap_fn)) : Ref();
  int skip = nowrap ? PySequence_Contains(nowrap.get(), f) : -1;
  if (skip < 0) return t.failFromPython("torch.overrides.get_default_nowrap_functions()");
  if (skip) return r;
  return convertToSubclass(t, r.take(), cls);
}

Result<ValuePtr> callDefaultTorchFunction(Tracer& t, PyObject* func, Args& args, Kwargs& kwargs) {
  PyObject* impl = defaultImplFunction();
  if (!impl) return t.failFromPython("torch.Tensor.__torch_function__");
  if (func != impl) return notHandled();
  PyObject* cls = args.empty() ? nullptr : args[0]->real();
  if (!cls || !PyType_Check(cls)) return t.fail("torch.Tensor.__torch_function__ called without its class");
  Args rest(args.begin() + 1, args.end());
  return defaultTorchFunction(t, cls, rest, kwargs);
}

Result<ValuePtr> convertToSubclass(Tracer& t, const ValuePtr& v, PyObject* cls) {
  PyTypeObject* tt = tensorType();
  if (!tt) return t.failFromPython("torch.Tensor");
  if (cls == reinterpret_cast<PyObject*>(tt)) return v;
  if (const Tensor* plain = v->get<Tensor>()) {
    if (isScalarValue(t, v)) return v;
    return Value::of(SubclassTensor{plain->node, Ref::borrow(cls)});
  }
  if (const SubclassTensor* s = v->get<SubclassTensor>()) {
    if (PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(s->cls.get()), reinterpret_cast<PyTypeObject*>(cls))) return v;
    return Value::of(SubclassTensor{s->node, Ref::borrow(cls)});
  }
  if ((v->is(Kind::Tuple) && !v->as<Tuple>().attrs) || v->is(Kind::List)) {
    // type(ret)(converted items): a new tuple or list (of the namedtuple/structseq class).
    std::vector<ValuePtr> items;
    for (const ValuePtr& item : *v->elements()) {
      Result<ValuePtr> c = convertToSubclass(t, item, cls);
      if (!c) return c;
      items.push_back(c.take());
    }
    if (v->is(Kind::List)) return Value::list(std::move(items));
    return Value::of(Tuple{std::move(items), v->as<Tuple>().namedtuple.copy(), nullptr});
  }
  return v;
}

Result<ValuePtr> torchFunctionDispatch(Tracer& t, PyObject* func, const std::vector<ValuePtr>& relevant, Args args,
                                       Kwargs kwargs, bool kwargs_as_dict) {
  std::vector<PyObject*> types = overloadedTypes(relevant);
  if (types.empty() && !t.functionModeActive()) return runWithoutSubclassDispatch(t, func, std::move(args), std::move(kwargs));
  std::vector<ValuePtr> type_values;
  for (PyObject* c : types) type_values.push_back(Value::callable(c));
  ValuePtr types_v = Value::tuple(std::move(type_values));
  ValuePtr func_v = Value::callable(func);
  ValuePtr kwargs_v;
  if (kwargs.empty() && !kwargs_as_dict) {
    kwargs_v = Value::constant(Py_None);
  } else {
    std::vector<Ref> keys;
    std::vector<ValuePtr> values;
    for (auto& kv : kwargs) {
      keys.push_back(kv.first.copy());
      values.push_back(kv.second);
    }
    kwargs_v = Value::dict(reinterpret_cast<PyObject*>(&PyDict_Type), std::move(keys), std::move(values));
  }
  ValuePtr args_v = Value::tuple(args);
  if (t.functionModeActive()) {
    // The innermost mode the program entered comes before any subclass: its
    // __torch_function__ runs with it taken off the stack (what it calls goes to the next
    // mode, then to the subclasses), and it is put back however that ends, as torch does.
    ValuePtr mode = t.functionModes().back();
    t.functionModes().pop_back();
    Result<ValuePtr> tf = getAttr(t, mode, torchFunctionName());
    Result<ValuePtr> r = tf ? call(t, tf.take(), {func_v, types_v, args_v, kwargs_v}, {}) : std::move(tf);
    t.functionModes().push_back(mode);
    if (!r) return r;
    if ((*r)->constant() == Py_NotImplemented)
      return t.fail("a TorchFunctionMode's __torch_function__ returned NotImplemented (not modelled)");
    return r;
  }
  PyObject* default_impl = defaultImplFunction();
  if (!default_impl) return t.failFromPython("torch.Tensor.__torch_function__");
  for (PyObject* cls : types) {
    PyObject* tf = torchFunctionOf(cls);
    Result<ValuePtr> r = notHandled();
    if (Py_IS_TYPE(tf, &PyClassMethod_Type)) {
      Ref fn = Ref::steal(PyObject_GetAttrString(tf, "__func__"));
      if (!fn) return t.failFromPython("a classmethod's function");
      if (fn.get() == default_impl) {
        Args a{func_v, types_v, args_v, kwargs_v};
        Kwargs no_kw;
        r = defaultTorchFunction(t, cls, a, no_kw);
      } else {
        r = call(t, Value::boundMethod(Value::callable(cls), fn.get()), {func_v, types_v, args_v, kwargs_v}, {});
      }
    } else {
      return t.fail(std::string("a __torch_function__ that is not a classmethod (") + reinterpret_cast<PyTypeObject*>(cls)->tp_name +
                    ") is not supported yet");
    }
    if (!r) return r;
    if ((*r)->constant() == Py_NotImplemented) continue;
    return r;
  }
  return t.raiseNew(PyExc_TypeError, "no implementation found for a torch function on types that implement __torch_function__");
}

namespace {

// The method torch hands to __torch_function__ for an operator's special method of its C
// tensor class (x + y is TensorBase.add, 1 < x TensorBase.gt); others as themselves.
const char* dispatchedName(const char* dunder) {
  static const char* const kNames[][2] = {
      {"__add__", "add"},   {"__radd__", "add"},   {"__iadd__", "add_"},  {"__sub__", "sub"},   {"__isub__", "sub_"},
      {"__mul__", "mul"},   {"__rmul__", "mul"},   {"__imul__", "mul_"},  {"__truediv__", "div"}, {"__itruediv__", "div_"},
      {"__matmul__", "matmul"}, {"__lt__", "lt"},  {"__le__", "le"},      {"__gt__", "gt"},     {"__ge__", "ge"},
      {"__neg__", "neg"},   {"__abs__", "abs"}};
  for (const auto& row : kNames)
    if (strcmp(row[0], dunder) == 0) return row[1];
  return dunder;
}

// Calls torch.Tensor's special method `dunder` with `args` (the receiver first).
Result<ValuePtr> callTensorDunder(Tracer& t, const std::string& dunder, Args args) {
  PyTypeObject* tt = tensorType();
  if (!tt) return t.failFromPython("torch.Tensor");
  Ref name = Ref::steal(PyUnicode_InternFromString(dunder.c_str()));
  if (!name) return t.failFromPython("a special method's name");
  PyObject* descr = _PyType_Lookup(tt, name.get());
  if (!descr) return notHandled();
  Ref hold = Ref::borrow(descr);
  if (PyFunction_Check(descr)) return t.inlineFunction(descr, -1, std::move(args), {});
  if (!isTensorMethodDescriptor(descr)) return t.fail("operator " + dunder + " of a tensor subclass is not supported yet");
  Ref func = Ref::steal(PyObject_GetAttrString(reinterpret_cast<PyObject*>(tt), dispatchedName(dunder.c_str())));
  if (!func) return t.failFromPython("torch.Tensor." + dunder);
  std::vector<ValuePtr> relevant(args.begin(), args.end());
  return torchFunctionDispatch(t, func.get(), relevant, std::move(args), {}, false);  // relevant copied first
}

bool tensorLike(const ValuePtr& v) { return v->is(Kind::Tensor) || v->is(Kind::SubclassTensor); }

}  // namespace

Result<ValuePtr> callWithSubclassArgs(Tracer& t, const ValuePtr& fn, Args& args, Kwargs& kwargs) {
  PyObject* f = fn->real();
  if (!f) return notHandled();
  PyObject* handle = lookup(Obj::torch_overrides_handle_torch_function);
  if (!handle) return t.failFromPython("torch.overrides.handle_torch_function");
  if (f == handle) {
    // handle_torch_function(public_api, relevant_args, *args, **kwargs), as torch's Python
    // functions call it once has_torch_function said yes.
    if (args.size() < 2) return t.fail("torch.overrides.handle_torch_function() with too few arguments");
    PyObject* public_api = args[0]->real();
    const std::vector<ValuePtr>* relevant = args[1]->elements();
    if (!public_api || !relevant || args[1]->is(Kind::Iterator)) return t.fail("torch.overrides.handle_torch_function() of these arguments");
    return torchFunctionDispatch(t, public_api, *relevant, Args(args.begin() + 2, args.end()), std::move(kwargs), true);
  }
  // torch's dispatch queries are answered from the types (call_rules.cpp dispatchQuery).
  if (f == lookup(Obj::torch_C_has_torch_function) || f == lookup(Obj::torch_C_has_torch_function_unary) ||
      f == lookup(Obj::torch_C_has_torch_function_variadic))
    return notHandled();
  PyErr_Clear();
  if (PyCFunction_Check(f) && args.size() == 1 && kwargs.empty() && args[0]->is(Kind::SubclassTensor)) {
    // len(x) and abs(x): the tensor's special method (Tensor.__len__ traced, TensorBase.abs dispatched).
    const char* n = reinterpret_cast<PyCFunctionObject*>(f)->m_ml->ml_name;
    PyObject* self = PyCFunction_GET_SELF(f);
    bool builtin = self && PyModule_Check(self) && strcmp(PyModule_GetName(self), "builtins") == 0;
    if (!builtin) PyErr_Clear();
    if (builtin && (strcmp(n, "len") == 0 || strcmp(n, "abs") == 0))
      return callTensorDunder(t, std::string("__") + n + "__", {args[0]});
  }
  // Under a mode alone, a Python function goes by the ordinary rules (inlined, or a torch
  // function recorded as one node after the mode is handed it: callTorchFunction).
  if (PyFunction_Check(f) && !anySubclassTensor(args, kwargs)) return notHandled();
  if (PyFunction_Check(f)) {
    // A Python function of torch (F.sigmoid, Tensor.__rsub__, Tensor.split) is traced: it
    // asks has_torch_function and hands over to handle_torch_function, or calls what
    // dispatches, as eagerly; the user's functions are inlined anyway.
    if (!isTorchCallable(f)) return notHandled();
    return t.inlineFunction(f, fn->reg, std::move(args), std::move(kwargs));
  }
  // Tensor.as_subclass is not handed to __torch_function__ (torch's C method does not ask).
  if (isTensorMethodDescriptor(f) && PyUnicode_CompareWithASCIIString(PyDescr_NAME(f), "as_subclass") == 0 && !args.empty() &&
      args[0]->is(Kind::SubclassTensor))
    return tensorAsSubclass(t, args[0], Args(args.begin() + 1, args.end()), std::move(kwargs));
  if (!anySubclassTensor(args, kwargs) && !t.functionModeActive()) {
    // No mode and no subclass: a tensor method or property getter called as a function on
    // a tensor (what a mode's __torch_function__ calls) is that tensor's; anything else
    // goes by the ordinary rules.
    bool on_tensor = !args.empty() && args[0]->is(Kind::Tensor);
    if (on_tensor && (propertyGetterName(f) || isTensorMethodDescriptor(f)))
      return runWithoutSubclassDispatch(t, f, std::move(args), std::move(kwargs));
    return notHandled();
  }
  if (!anySubclassTensor(args, kwargs)) {
    // Only a mode the program entered is on: torch hands it what its argument parser
    // dispatches (the overridable functions, the tensor methods and property getters,
    // torch.ops operators); other bindings (functorch's, the mode stack's own) run as they are.
    if (!isTensorMethodDescriptor(f) && !propertyGetterName(f) && !isOverridable(f) && !isOpsOperator(f))
      return notHandled();
    std::vector<ValuePtr> relevant = relevantOf(args, kwargs);
    return torchFunctionDispatch(t, f, relevant, std::move(args), std::move(kwargs), false);
  }
  if (isTensorMethodDescriptor(f) || propertyGetterName(f) || (PyCFunction_Check(f) && isTorchCallable(f))) {
    std::vector<ValuePtr> relevant = relevantOf(args, kwargs);
    return torchFunctionDispatch(t, f, relevant, std::move(args), std::move(kwargs), false);
  }
  return notHandled();
}


Result<ValuePtr> subclassOperator(Tracer& t, const char* op, Args operands) {
  bool any = false;
  for (const ValuePtr& v : operands) any = any || v->is(Kind::SubclassTensor);
  // Under a mode the program entered, an operator on a plain tensor is dispatched as well
  // (torch hands the mode TensorBase.add for x + 1); a symbolic size is a number, not a tensor.
  if (!any && t.functionModeActive())
    for (const ValuePtr& v : operands) any = any || (v->is(Kind::Tensor) && !isScalarValue(t, v));
  if (!any) return notHandled();
  std::string name = op;
  if (name.back() == '_') name.pop_back();  // and_, or_
  if (operands.size() == 1) return callTensorDunder(t, "__" + name + "__", std::move(operands));
  if (name == "getitem" || name == "setitem") {
    if (!tensorLike(operands[0])) return t.fail("indexing with a tensor subclass instance is not supported yet");
    return callTensorDunder(t, "__" + name + "__", std::move(operands));
  }
  static const char* const kSwapped[][2] = {{"lt", "gt"}, {"le", "ge"}, {"gt", "lt"}, {"ge", "le"}, {"eq", "eq"}, {"ne", "ne"}};
  const ValuePtr a = operands[0], b = operands[1];
  if (tensorLike(a)) {
    // a's own special method (a subclass instance on the right inherits the same slot, so
    // Python does not try it first).
    Result<ValuePtr> r = callTensorDunder(t, "__" + name + "__", {a, b});
    if (!r.notHandled()) return r;
    return t.fail("operator " + name + " of a tensor subclass is not supported yet");
  }
  for (const auto& row : kSwapped)
    if (name == row[0]) {
      Result<ValuePtr> r = callTensorDunder(t, std::string("__") + row[1] + "__", {b, a});
      if (!r.notHandled()) return r;
    }
  if (name.size() > 1 && name[0] == 'i') name = name.substr(1);  // 1 += x: the reflected binary
  Result<ValuePtr> r = callTensorDunder(t, "__r" + name + "__", {b, a});
  if (!r.notHandled()) return r;
  return t.fail("operator " + name + " with a tensor subclass on the right is not supported yet");
}

Result<ValuePtr> subclassTensorMethod(Tracer& t, const ValuePtr& self, PyObject* name, Args& args, Kwargs& kwargs) {
  PyTypeObject* tt = tensorType();
  if (!tt) return t.failFromPython("torch.Tensor");
  PyObject* descr = _PyType_Lookup(tt, name);
  if (!descr) return t.fail(std::string("Tensor has no method '") + PyUnicode_AsUTF8(name) + "'");
  Ref hold = Ref::borrow(descr);
  if (PyUnicode_CompareWithASCIIString(name, "as_subclass") == 0) return tensorAsSubclass(t, self, args, std::move(kwargs));
  args.insert(args.begin(), self);
  if (PyFunction_Check(descr)) return t.inlineFunction(descr, -1, std::move(args), std::move(kwargs));  // Tensor.split
  if (!isTensorMethodDescriptor(descr))
    return t.fail(std::string("Tensor.") + PyUnicode_AsUTF8(name) + " of a tensor subclass instance is not supported yet");
  // x.__iadd__(1) is handed over as TensorBase.add_, as x += 1 is.
  Ref func = Ref::steal(PyObject_GetAttrString(reinterpret_cast<PyObject*>(tt), dispatchedName(PyUnicode_AsUTF8(name))));
  if (!func) return t.failFromPython("torch.Tensor's method");
  std::vector<ValuePtr> relevant = relevantOf(args, kwargs);
  return torchFunctionDispatch(t, func.get(), relevant, std::move(args), std::move(kwargs), false);
}

Result<ValuePtr> subclassTensorAttr(Tracer& t, const ValuePtr& obj, PyObject* name) {
  const SubclassTensor& s = obj->as<SubclassTensor>();
  PyObject* cls = s.cls.get();
  const char* n = PyUnicode_AsUTF8(name);
  if (strcmp(n, "__class__") == 0) return Value::callable(cls);
  if (strcmp(n, "__dict__") == 0) return t.fail("the __dict__ of a tensor subclass instance is not supported yet");
  // Its own attributes: those of the object read from the program, read and guarded; one
  // made in the trace (as_subclass) has none.
  if (obj->reg >= 0) {
    PyObject* example = t.subclassInputObject(s.node);
    if (PyObject* own = example ? instanceDictItem(example, n) : nullptr) {
      int reg = t.load(guards::LoadKind::InstanceDict, obj->reg, 0, name, t.guards().sourceName(obj->reg) + "." + n);
      return t.wrap(own, reg);
    }
    t.guards().checkNoInstanceAttr(obj->reg, name);  // an instance attribute would shadow the class's
  }
  PyObject* descr = _PyType_Lookup(reinterpret_cast<PyTypeObject*>(cls), name);
  if (!descr) return t.raiseNew(PyExc_AttributeError, std::string("'") + reinterpret_cast<PyTypeObject*>(cls)->tp_name +
                                                         "' object has no attribute '" + n + "'");
  Ref hold = Ref::borrow(descr);
  guardTypeAttribute(t, cls, name);
  PyTypeObject* tt = tensorType();
  if (!tt) return t.failFromPython("torch.Tensor");
  if (_PyType_Lookup(tt, name) == descr) {
    // torch's: a method (called later, dispatched then), or a property whose getter is
    // what __torch_function__ is handed (Tensor.shape.__get__).
    if (Py_TYPE(descr)->tp_descr_set == nullptr || PyFunction_Check(descr)) return Value::namedMethod(obj, name);
    if (Py_IS_TYPE(descr, &PyGetSetDescr_Type)) {
      Ref get = Ref::steal(PyObject_GetAttrString(descr, "__get__"));
      if (!get) return t.failFromPython("a tensor property's getter");
      return torchFunctionDispatch(t, get.get(), {obj}, {obj}, {}, false);
    }
    if (PyObject_TypeCheck(descr, &PyProperty_Type)) {
      Ref fget = Ref::steal(PyObject_GetAttrString(descr, "fget"));
      if (!fget || !PyFunction_Check(fget.get())) return PyErr_Clear(), t.fail(std::string("Tensor.") + n + " of a tensor subclass instance");
      return t.inlineFunction(fget.get(), -1, {obj}, {});
    }
    return t.fail(std::string("Tensor.") + n + " of a tensor subclass instance is not supported yet");
  }
  // The subclass's own attributes (guarded as class attributes).
  if (PyFunction_Check(descr)) return Value::boundMethod(obj, descr);
  if (Py_IS_TYPE(descr, &PyClassMethod_Type) || Py_IS_TYPE(descr, &PyStaticMethod_Type)) {
    Ref fn = Ref::steal(PyObject_GetAttrString(descr, "__func__"));
    if (!fn) return t.failFromPython("a class's method");
    if (Py_IS_TYPE(descr, &PyStaticMethod_Type)) return Value::callable(fn.get());
    if (!PyFunction_Check(fn.get())) return t.fail(std::string("classmethod '") + n + "' of a tensor subclass");
    return Value::boundMethod(Value::callable(cls), fn.get());
  }
  if (PyObject_TypeCheck(descr, &PyProperty_Type)) {
    Ref fget = Ref::steal(PyObject_GetAttrString(descr, "fget"));
    if (!fget || !PyFunction_Check(fget.get())) return PyErr_Clear(), t.fail(std::string("property '") + n + "' of a tensor subclass");
    return t.inlineFunction(fget.get(), -1, {obj}, {});
  }
  if (isConstantObject(descr)) return Value::constant(descr);
  return t.fail(std::string("attribute '") + n + "' of a tensor subclass instance (a " + Py_TYPE(descr)->tp_name +
                ") is not supported yet");
}

Result<bool> subclassIdentical(Tracer& t, const ValuePtr& a, const ValuePtr& b) {
  const bool sa = a->is(Kind::SubclassTensor), sb = b->is(Kind::SubclassTensor);
  if (a == b) return true;
  if (sa && sb && a->reg >= 0 && b->reg >= 0) {
    // Two objects read from the program (one object is one value: builder.cpp).
    t.guards().checkAliasing(a->reg, b->reg, false);
    return false;
  }
  // One made in the trace is a new object (as_subclass); a subclass instance is no other kind of value.
  return false;
}

Result<ValuePtr> subclassBinaryOperator(Tracer& t, const BinaryOperands& o) {
  return subclassOperator(t, o.fn_name, {o.a, o.b});
}

// The plan of a tensor subclass instance: the object read from the program, or the graph tensor viewed as an instance of its class (OutputPlanner::plan).
Done rebuildSubclassTensor(OutputPlanner& p, const ValuePtr& v, runtime::OutputPlan* out) {
  namespace P = runtime::plan;
  // The object read from the program is itself; one made in the trace is its graph
  // tensor viewed as an instance of its class, as torch's default __torch_function__
  // makes it (as_subclass).
  const SubclassTensor& s = v->as<SubclassTensor>();
  if (v->reg >= 0) {
    out->step = P::Register{v->reg};
    return {};
  }
  PyObject* as_subclass = lookup(Obj::cdynamo_subclass_as_subclass);
  if (!as_subclass) return p.tracer().failFromPython("cdynamo._internal.tensor_subclass.as_subclass");
  std::vector<runtime::OutputPlan> args(2);
  const int in = p.tracer().inputRegOf(s.node);
  if (in >= 0) args[0].step = P::Register{in};
  else if (Done d = p.plan(Value::tensor(s.node), &args[0]); !d) return d;
  args[1] = runtime::OutputPlan::constant(s.cls.get());
  out->step = P::Call{Ref::borrow(as_subclass), std::move(args)};
  return {};
}

bool tensorMethodOrGetter(PyObject* f) { return isTensorMethodDescriptor(f) || propertyGetterName(f) != nullptr; }

// ---- TorchFunctionModes the program enters ----
//
// `with Mode():` runs TorchFunctionMode.__enter__ (traced), which pushes the mode with
// torch._C._push_on_torch_function_stack; __exit__ pops it. Those bindings act on the
// trace's own stack (Tracer::functionModes), never on torch's: nothing real is pushed while
// tracing, so fake tensor propagation and the graph run without the mode, and the mode's
// __torch_function__ is inlined wherever torch would call it (torchFunctionDispatch). The
// readers of the stack answer the real depth at the frame's start (guarded) plus the trace's.
Result<ValuePtr> callFunctionModeBinding(Tracer& t, PyObject* f, Args& args, Kwargs& kwargs) {
  auto is = [&](Obj o) {
    PyObject* b = lookup(o);
    if (!b) PyErr_Clear();
    return b && b == f;
  };
  std::vector<ValuePtr>& modes = t.functionModes();
  const long outer = t.outerFunctionModeDepth();
  if (is(Obj::torch_C_push_on_torch_function_stack)) {
    if (args.size() != 1 || !kwargs.empty()) return t.fail("torch._C._push_on_torch_function_stack() with these arguments");
    const ValuePtr& mode = args[0];
    if (!mode->is(Kind::NewObject) && !mode->is(Kind::Object))
      return t.fail("pushing something other than a mode object on the TorchFunctionMode stack");
    modes.push_back(mode);
    return Value::constant(Py_None);
  }
  if (is(Obj::torch_C_pop_torch_function_stack)) {
    if (!args.empty() || !kwargs.empty()) return t.fail("torch._C._pop_torch_function_stack() with arguments");
    if (modes.empty()) return t.fail("popping a TorchFunctionMode the frame did not enter (not modelled)");
    ValuePtr top = modes.back();
    modes.pop_back();
    return top;
  }
  if (modes.empty()) return notHandled();  // torch's own answer, guarded (the stack at the start)
  if (is(Obj::torch_C_len_torch_function_stack)) {
    if (!args.empty() || !kwargs.empty()) return t.fail("torch._C._len_torch_function_stack() with arguments");
    return Value::constant(Ref::steal(PyLong_FromLong(outer + static_cast<long>(modes.size()))).get());
  }
  if (is(Obj::torch_C_is_torch_function_mode_enabled)) return Value::constant(Py_True);
  if (is(Obj::torch_C_get_function_stack_at)) {
    PyObject* c = args.size() == 1 && kwargs.empty() ? args[0]->constant() : nullptr;
    if (!c || !PyLong_Check(c)) return t.fail("torch._C._get_function_stack_at() of a non-constant");
    long i = PyLong_AsLong(c);
    if (i >= outer && i < outer + static_cast<long>(modes.size())) return modes[static_cast<size_t>(i - outer)];
    return t.fail("torch._C._get_function_stack_at() of a mode entered before the frame (not modelled)");
  }
  return notHandled();
}

// A tensor property read under a mode the program entered (x.shape, x.dtype): torch hands
// the mode the getter (Tensor.shape.__get__). NotHandled when no mode is on or `name` is
// not one of torch's tensor properties.
Result<ValuePtr> tensorAttrUnderMode(Tracer& t, const ValuePtr& obj, PyObject* name) {
  if (!t.functionModeActive() || !obj->is(Kind::Tensor) || isScalarValue(t, obj)) return notHandled();
  PyTypeObject* tt = tensorType();
  if (!tt) return t.failFromPython("torch.Tensor");
  PyObject* descr = _PyType_Lookup(tt, name);
  if (!descr || !Py_IS_TYPE(descr, &PyGetSetDescr_Type)) return notHandled();
  Ref hold = Ref::borrow(descr);
  Ref get = Ref::steal(PyObject_GetAttrString(descr, "__get__"));
  if (!get) return t.failFromPython("a tensor property's getter");
  return torchFunctionDispatch(t, get.get(), {obj}, {obj}, {}, false);
}

}  // namespace cdynamo::trace
