// The operations of the symbolic interpreter (STYLE.md habit 4): what a Python operation
// means on symbolic values. Opcode handlers call these; each is one decision over value
// kinds, in the file named beside it. They take the Tracer for its services (failing,
// raising, guards, the graph, inlining) and report through trace/result.h: Unsupported
// (the trace stops; the reason is recorded), Raised (an exception of the traced program is
// in flight), and, where documented, NotHandled.
#pragma once
#include <Python.h>

#include <utility>
#include <vector>

#include "bytecode/opcodes.h"
#include "graph/graph_builder.h"
#include "trace/protocol/callables.h"
#include "trace/engine/result.h"
#include "trace/values/value.h"

namespace cdynamo::trace {

class Tracer;

// ---- attributes.cpp: reading and storing attributes ---------------------------------------
Result<ValuePtr> getAttr(Tracer& t, const ValuePtr& obj, PyObject* name);
Done storeAttr(Tracer& t, const ValuePtr& obj, PyObject* name, const ValuePtr& value);
// delattr(obj, name) of an object made in the trace or read from the program: its class's
// own __delattr__ inlined, a property's deleter, or the attribute removed (from the
// object's __dict__ value when made in the trace; a recorded effect replayed after the
// graph when from the program, nn.Module's __delattr__ included). AttributeError if absent.
Done deleteAttr(Tracer& t, const ValuePtr& obj, PyObject* name);
// object.__delattr__(obj, name): the generic deletion, the class's own __delattr__ skipped.
Done genericDelAttr(Tracer& t, const ValuePtr& obj, PyObject* name);
// Attributes of a function made in the trace: its name, module, doc, and those set on it.
Result<ValuePtr> functionAttr(Tracer& t, const ValuePtr& fn, PyObject* name);

// ---- calls.cpp: calling each kind of callable ---------------------------------------------
Result<ValuePtr> call(Tracer& t, const ValuePtr& fn, Args args, Kwargs kwargs);
// A call of a real callable (Kind::Callable): the callable table, then the call rules
// (call_rules.cpp).
Result<ValuePtr> callCallable(Tracer& t, const ValuePtr& fn, Args args, Kwargs kwargs);
// call_rules.cpp: the rules for callables no table row names (torch functions, user
// classes, exception classes, Python functions, ...), tried in order; Unsupported when none applies.
Result<ValuePtr> callByRules(Tracer& t, const ValuePtr& fn, Args& args, Kwargs& kwargs);
// A functools.lru_cache / functools.cache wrapper (call_rules.cpp); never sets an error.
bool isCacheWrapper(PyObject* f);
// The rebuild function (borrowed) of the polyfill class that stands for iterator type `type`
// (cdynamo._polyfills.count for itertools.count): it makes a real iterator of that type from
// an instance. Null when `type` has none (a Python error set only when looking it up failed).
PyObject* polyfillRebuild(PyObject* type);
// A callable with a Python version in cdynamo._polyfills (itertools.chain, functools.reduce,
// torch._foreach_pow, the method descriptor torch.Tensor.addcmul_): that version inlined in
// its place; notHandled when it has none, or when the call comes from its own polyfill.
Result<ValuePtr> callPolyfill(Tracer& t, PyObject* f, Args& args, Kwargs& kwargs);
// `cls.apply(*args, **kwargs)` of a torch.autograd.Function subclass (args without cls);
// `target` is the apply being called (Function.apply bound to cls, or the C
// _FunctionBase.apply an override reaches through super()). With no gradient to record it
// is cdynamo._polyfills.autograd_function_apply inlined (forward run under no_grad on a
// stand-in ctx, outputs wrapped as apply wraps them). A call that records a backward is one
// call_function node of `target` when cdynamo._polyfills.autograd_function_refusal finds
// nothing in forward/backward that reaches outside the call; else Unsupported with its reason.
Result<ValuePtr> callAutogradFunctionApply(Tracer& t, PyObject* cls, PyObject* target, Args args, Kwargs kwargs);
// Whether `function` is torch.autograd.Function.apply's function (never sets an error).
bool isAutogradFunctionApply(PyObject* function);
// Borrowed value of `name` in the instance dict of `obj`, or null (objects.cpp).
PyObject* instanceDictItem(PyObject* obj, const char* name);
// Whether `code` is marked by cdynamo.disable, and the reason naming the function.
bool isDisabledCodeObject(PyObject* code);
std::string disabledReason(PyObject* qualname);

// ---- objects.cpp: user-defined classes --------------------------------------------------
// An object read from the program (Kind::Object) or made in the trace (Kind::NewObject).
inline bool isUserObject(const ValuePtr& v) { return v->is(Kind::Object) || v->is(Kind::NewObject); }
// A class made by collections.namedtuple (a tuple subclass with _fields).
bool isNamedTupleClass(PyObject* cls);
Result<ValuePtr> objectGetAttr(Tracer& t, const ValuePtr& obj, PyObject* name);
// An attribute of a namedtuple value (Tuple with a namedtuple class `cls`) that a class
// above tuple defines: a method bound to the tuple, a staticmethod, a classmethod bound to
// the class, a property's getter run on it, a constant. NotHandled when only tuple has it.
Result<ValuePtr> namedTupleClassAttr(Tracer& t, const ValuePtr& self, PyObject* cls, PyObject* name);
// A special method (`name`: __add__, __eq__, ...) that a namedtuple value's class defines as
// a Python function above tuple, inlined with the tuple first; NotHandled when the class
// leaves it to tuple's C slot.
Result<ValuePtr> namedTupleDunder(Tracer& t, const ValuePtr& self, PyObject* name, std::vector<ValuePtr> args);
// The Python __new__ a class defines above its builtin base (unwrapped from its
// staticmethod), or null when its instances come from the base's __new__ or from the
// __new__ a namedtuple class is generated with.
PyObject* ownPythonNew(PyObject* cls);
// Guards what reading `name` of `self` (a value from the program) through its class
// assumed: not shadowed in its instance dict, the same object in the class that defines it,
// and absent from the classes before that one (a method replaced on the instance or a class).
void guardClassAttributeOf(Tracer& t, const ValuePtr& self, PyObject* name);
// hasattr() on a user object, an nn.Module, super() or a user class: getAttr with an
// AttributeError meaning false (guarded either way).
Result<bool> objectHasAttr(Tracer& t, const ValuePtr& obj, PyObject* name);
// When `r` is an AttributeError raised in the program: takes it out of flight, true.
bool takeAttributeError(Tracer& t, const Result<ValuePtr>& r);
// Whether hasattr()/getattr(o, n, default) are answered by objectHasAttr for this value.
bool probesByLookup(const ValuePtr& v);
// object.__getattribute__(self, name): the generic lookup, without the class's own
// __getattribute__ (and, as object's, without __getattr__).
Result<ValuePtr> genericGetAttr(Tracer& t, const ValuePtr& self, PyObject* name, PyObject* after, bool with_getattr);
Result<ValuePtr> newObject(Tracer& t, PyObject* cls, Args args, Kwargs kwargs);
// dict, OrderedDict, tuple or list when instances of `cls` are those (the builtin base whose
// items they carry), else null.
PyTypeObject* containerBase(PyObject* cls);
// The items of a dict, tuple or list subclass instance (a Dict, Tuple or List value), or null.
ValuePtr basePart(const ValuePtr& v);
// An instance of `cls` (a subclass of dict, tuple or list; containerBase) made in the trace
// with the items `part` (a value of its base's kind): a NewObject, or for a namedtuple class
// the Tuple value itself, marked as that class.
Result<ValuePtr> newContainerSubclassInstance(Tracer& t, PyObject* cls, ValuePtr part);
// A C method of dict/OrderedDict (a method or slot descriptor) called with a dict subclass
// instance first: the container operation on its items. NotHandled for anything else.
Result<ValuePtr> callBaseMethod(Tracer& t, PyObject* fn, Args& args, Kwargs& kwargs);
// An attribute a Python function from the program keeps in its __dict__ (fn.flag): read
// through the function's register and guarded, absence too (AttributeError raised).
// NotHandled for the function type's own attributes and for functions without a source.
Result<ValuePtr> guardedFunctionAttr(Tracer& t, const ValuePtr& fn, PyObject* name);
// object.__setattr__ on an object made in the trace (no own __setattr__).
Done genericSetAttr(Tracer& t, const ValuePtr& obj, PyObject* name, const ValuePtr& value);

// Guards class attribute `name` of `type` as resolved now (the same object in the class
// that defines it, absent from the classes before it).
void guardTypeAttribute(Tracer& t, PyObject* type, PyObject* name);

// ---- torch_function.cpp: tensor subclasses with __torch_function__ (Kind::SubclassTensor) ----
// Whether an argument (or an item of a tuple or list argument) is a SubclassTensor.
bool anySubclassTensor(const Args& args, const Kwargs& kwargs);
// A SubclassTensor whose class takes part in __torch_function__ dispatch.
bool takesPartInDispatch(const ValuePtr& v);
// Whether instances of tensor subclass `cls` are modelled (no __torch_dispatch__ of its own,
// not an nn.Parameter subclass).
bool subclassModelled(PyObject* cls);
// torch's override dispatch of `func` (a torch function, a Tensor method descriptor, a
// tensor property's getter) over the classes of the SubclassTensors among `relevant`: each
// class's __torch_function__ inlined (torch.Tensor's modelled) until one does not return
// NotImplemented; with none, func run on the plain tensors. kwargs_as_dict: hand kwargs
// over as a dict even when empty (handle_torch_function does; C dispatch hands None).
Result<ValuePtr> torchFunctionDispatch(Tracer& t, PyObject* func, const std::vector<ValuePtr>& relevant, Args args,
                                       Kwargs kwargs, bool kwargs_as_dict);
// torch.Tensor.__torch_function__(cls, func, types, args, kwargs) (args/kwargs as passed to it).
Result<ValuePtr> defaultTorchFunction(Tracer& t, PyObject* cls, Args& args, Kwargs& kwargs);
// A call of the function under torch.Tensor.__torch_function__'s classmethod (what
// super().__torch_function__ reaches), the class first: modelled; NotHandled for any other.
Result<ValuePtr> callDefaultTorchFunction(Tracer& t, PyObject* func, Args& args, Kwargs& kwargs);
// `func` called with subclass dispatch off: on the plain tensors of the SubclassTensors
// among the arguments; a result that is one of them (x.add_(1)) is that argument again.
Result<ValuePtr> runWithoutSubclassDispatch(Tracer& t, PyObject* func, Args args, Kwargs kwargs);
// torch's _convert(ret, cls): tensors made instances of cls (tuples and lists item by item).
Result<ValuePtr> convertToSubclass(Tracer& t, const ValuePtr& v, PyObject* cls);
// x.as_subclass(cls) of a plain tensor (or, with dispatch off, of a subclass instance).
Result<ValuePtr> tensorAsSubclass(Tracer& t, const ValuePtr& self, Args args, Kwargs kwargs);
// A call with SubclassTensor arguments of one of torch's callables (dispatched, or traced
// when it is Python); NotHandled for every other callable.
Result<ValuePtr> callWithSubclassArgs(Tracer& t, const ValuePtr& fn, Args& args, Kwargs& kwargs);
// An operator (the operator module's name: "add", "iadd", "lt", "neg", "getitem", "setitem")
// with a SubclassTensor operand: torch.Tensor's special method, dispatched; NotHandled
// when no operand is one.
Result<ValuePtr> subclassOperator(Tracer& t, const char* op, Args operands);
Result<ValuePtr> subclassTensorMethod(Tracer& t, const ValuePtr& self, PyObject* name, Args& args, Kwargs& kwargs);
Result<ValuePtr> subclassTensorAttr(Tracer& t, const ValuePtr& obj, PyObject* name);
// `a is b` where one of them is a SubclassTensor.
Result<bool> subclassIdentical(Tracer& t, const ValuePtr& a, const ValuePtr& b);
// A torch callable by its module (torch, torch.nn.functional, torch._tensor; not torch._dynamo).
bool isTorchCallable(PyObject* fn);

// ---- namespaces.cpp: types.SimpleNamespace made in the trace ----------------------------
Result<ValuePtr> makeNamespace(Tracer& t, PyObject* fn, const char* name, Args& args, Kwargs& kwargs);
Result<ValuePtr> namespaceGetAttr(Tracer& t, const ValuePtr& ns, PyObject* name);
// Whether getattr(ns, name) finds something: one of its attributes or its class's.
bool namespaceHasAttr(const ValuePtr& ns, PyObject* name);
Done namespaceSetAttr(Tracer& t, const ValuePtr& ns, PyObject* name, const ValuePtr& value);
// Calls the Python-level special method `name` (a str) of a user object's class;
// NotHandled (nothing done) when the class has none.
Result<ValuePtr> callDunder(Tracer& t, const ValuePtr& obj, PyObject* name, Args args);
// str(obj) / repr(obj) of a user object: its class's Python __str__ (or, where that is
// object's, __repr__) inlined; notHandled when neither is Python code.
Result<ValuePtr> userObjectStr(Tracer& t, const ValuePtr& obj, bool repr);
// An f-string piece {obj}, {obj!s}, {obj!r} (conversion 0, 1, 2) without a format spec, of
// a user object: as str()/repr(); notHandled for others (own __format__, !a).
Result<ValuePtr> userObjectFormat(Tracer& t, const ValuePtr& obj, int conversion);
// The same for an nn.Module: the Python special method `name` its class defines (its
// class attribute guarded), inlined; NotHandled when the class has none in Python.
Result<ValuePtr> callModuleDunder(Tracer& t, const ValuePtr& module, PyObject* name, Args args);
Result<ValuePtr> makeSuper(Tracer& t, Args& args);

// ---- exceptions.cpp ---------------------------------------------------------------------
// An instance of an exception class, made for real when its construction runs no Python
// code (builtin exceptions and subclasses without __new__; a Python __init__ is traced).
Result<ValuePtr> makeException(Tracer& t, PyObject* cls, Args& args, Kwargs kwargs = {});

// ---- builtins.cpp / constants.cpp ---------------------------------------------------------
// A call of one of Python's builtins: `row` is its table row.
Result<ValuePtr> callBuiltin(Tracer& t, PyObject* fn, const CallableRow& row, Args& args, Kwargs& kwargs);
// The real Python object for a value made only of constants (constants, and tuples, lists,
// dicts and sets of them), or null (no error set) when it holds anything else.
Ref toPython(Tracer& t, const ValuePtr& v);
// Whether a value is an int: a constant int or a symbolic one (a SymInt of the graph).
bool isIntValue(Tracer& t, const ValuePtr& v);
// Whether a value is a torch.Size: a symbolic x.shape (a Tuple of that class) or a constant one.
bool isSizeValue(const ValuePtr& v);
// A torch.Size value of `items` when all are ints (isIntValue), else null.
ValuePtr newSize(Tracer& t, std::vector<ValuePtr> items);
// (a real iterator of Python type `type` (may be null) over `items` (a sequence), an
// iterator whose length hint counts the items left as the first is used), or null (no
// error set).
Ref realIterator(PyObject* type, PyObject* items);
// The value for a real Python object made only of constants.
Result<ValuePtr> fromPython(Tracer& t, PyObject* o);
// Calls a pure C function (math, operator, a method of an immutable constant, an immutable
// type) for real when every argument is made of constants; NotHandled when `fn` is not one
// or an argument is not made of constants.
Result<ValuePtr> foldConstantCall(Tracer& t, PyObject* fn, Args& args, Kwargs& kwargs);
// Python type of a value (borrowed), or null when it is not known.
PyObject* typeOf(Tracer& t, const ValuePtr& v);

// ---- operators.cpp: operators, subscripts, iteration, truth -------------------------------
Result<ValuePtr> binaryOp(Tracer& t, bytecode::BinaryOp op, const ValuePtr& a, const ValuePtr& b);
// The operator a graph records for `fn(a, b)`: an in-place operator of the operator module
// (operator.iadd) only when `a` is a tensor; with a number or constant `a` its binary form
// (operator.add), as Python falls back from __iadd__ to __add__/__radd__ (`acc = 0;
// acc += t` is `acc = acc + t`). Any other fn is returned as it is. Borrowed.
PyObject* recordedOperator(Tracer& t, PyObject* fn, const ValuePtr& a);
Result<ValuePtr> unaryOp(Tracer& t, bytecode::Op op, const ValuePtr& a);
Result<ValuePtr> compareOp(Tracer& t, int op, const ValuePtr& a, const ValuePtr& b);
Result<ValuePtr> subscript(Tracer& t, const ValuePtr& obj, const ValuePtr& index);
Result<ValuePtr> getIter(Tracer& t, const ValuePtr& obj);
// Python truth value of a value known at trace time.
Result<bool> truthValue(Tracer& t, const ValuePtr& v);
// What a class's __len__ returned, as len() takes it: an int >= 0 (a bool becomes its int;
// a symbolic int as it is); another type raises TypeError in the program, a negative int
// ValueError; a value of unknown type stops the trace.
Result<ValuePtr> lenDunderResult(Tracer& t, const ValuePtr& r);
// `item in container`.
Result<bool> contains(Tracer& t, const ValuePtr& container, const ValuePtr& item);
// `a is b`.
Result<bool> identical(Tracer& t, const ValuePtr& a, const ValuePtr& b);
// The items an iterable value yields (lists, tuples, dicts' keys, constants, modules),
// consuming an Iterator.
Done iterate(Tracer& t, const ValuePtr& v, std::vector<ValuePtr>* out);
// The items `v` would give, without consuming it when it is an Iterator.
Done peekItems(Tracer& t, const ValuePtr& v, std::vector<ValuePtr>* out);
// Sequential/ModuleList/ModuleDict: the children, read from _modules with its keys guarded.
// An nn.Sequential, ModuleList or ModuleDict whose class keeps that container's own
// special method `dunder` (decided by type: a subclass overriding it is not one).
bool isModuleContainer(const ValuePtr& m, PyObject* dunder);
Done moduleContainerItems(Tracer& t, const ValuePtr& m, std::vector<std::pair<Ref, ValuePtr>>* out);

// ---- containers.cpp: lists, tuples, dicts, sets made in the trace -------------------------
// Equality of two values as Python would decide it (identity first), when it can be known
// at trace time: true with *eq set (0 or 1), false when it cannot be known.
bool sameValue(const ValuePtr& a, const ValuePtr& b, int* eq);
// Whether `v` may be compared (and, with `hashed`, hashed) as its real object without running
// Python code or depending on an unguarded identity: a constant, a class or function, a
// Python module, whose type's __eq__ (and __hash__) are not Python functions.
bool realComparable(const ValuePtr& v, bool hashed = false);
// A program's call of a container's method: the arguments are checked against the C
// method's signature first (a call Python refuses raises its TypeError).
Result<ValuePtr> callContainerMethod(Tracer& t, const ValuePtr& self, PyObject* name, Args& args, Kwargs& kwargs);
// The interpreter's own use of a method as the implementation of an opcode or a special
// method (DELETE_SUBSCR and __delitem__ as pop(k), which deque.pop() does not take; SET_UPDATE
// as update): no signature check.
Result<ValuePtr> applyContainerMethod(Tracer& t, const ValuePtr& self, PyObject* name, Args& args, Kwargs& kwargs);
// The C type whose methods act on a container value (list, collections.deque, tuple, dict,
// OrderedDict, defaultdict, mappingproxy, set, frozenset; for a subclass instance's items,
// the first base that is not a class of the program), or null for other kinds.
PyTypeObject* containerCType(const ValuePtr& self);
// Raises the TypeError Python raises for a call of the container type `type` (dict,
// OrderedDict, defaultdict, ...) with more positional arguments than it takes: the type is
// called for real with None in their place (its argument check fails before any work).
Stop raiseConstructorArgumentError(Tracer& t, PyObject* type, size_t nargs, const Kwargs& kwargs);
// Sets and frozensets made in the trace (their items constants, modules, tensors by
// identity, frozensets of those). The order a walk of set `s` meets its items in: Python's
// (from the items' hashes) when they are all real objects, else the order they were added.
std::vector<ValuePtr> setIterationOrder(const Set& s);
// The real set an operation of the program would read for the set value `v` made in the
// trace: its shadow (Set::shadow, the same table eager execution's set has, history and
// all), made on first need; borrowed; null when there is none (an item without a real
// object, a set from the program, not a Set).
PyObject* realSetOperand(const ValuePtr& v);
// A mutable set value for `real`, a set computed for real from `operands` (at least one a set
// made in the trace, read through realSetOperand): its items are the operands' values for the
// objects it holds, its shadow `real` itself. Null when it holds an object none stands for.
ValuePtr setFromReal(PyObject* real, std::initializer_list<ValuePtr> operands);
// frozenset(iterable): a constant when its items are constants, else a frozen Set.
Result<ValuePtr> makeFrozenSet(Tracer& t, const ValuePtr& iterable);
// a | b, a & b, a - b, a ^ b (and the in-place forms, which change a set itself) of two
// sets or frozensets; NotHandled when either is not one.
Result<ValuePtr> setBinaryOp(Tracer& t, bytecode::BinaryOp op, const ValuePtr& a, const ValuePtr& b);
// a <op> b (COMPARE_OP's order: <, <=, ==, !=, >, >=) of two sets or frozensets by their
// members; NotHandled when either is not one.
Result<ValuePtr> setCompare(Tracer& t, int op, const ValuePtr& a, const ValuePtr& b);
Done storeSubscript(Tracer& t, const ValuePtr& obj, const ValuePtr& index, const ValuePtr& value);
// del obj[index] of a list, deque (a slice of a list) or dict value, as DELETE_SUBSCR and
// __delitem__ do it: an index out of range raises the IndexError of the item deletion
// ("list assignment index out of range", "deque index out of range"), not pop's.
Done deleteItem(Tracer& t, const ValuePtr& obj, const ValuePtr& index);
// The object that stands for `v` as a dict key (borrowed): a hashable constant, or a real
// object hashed by identity (a tensor or nn.Module from the program, a class, a function, a
// user object whose class keeps object's __hash__/__eq__), whose source is then guarded to be
// that object. Null, with no error set, when `v` cannot be a key the trace can hash.
PyObject* dictKeyOf(Tracer& t, const ValuePtr& v);
// Whether the real object `o` hashes and compares by identity, as a dict sees it: its type
// keeps object's __hash__ and __eq__ (type's, for a class), or it is a tensor
// (torch.Tensor.__hash__ is id(), and a dict compares identical keys before calling __eq__).
bool isIdentityKey(PyObject* o);
// The value of dict key `key` (the inverse of dictKeyOf; a key read from a program's dict is
// wrapped as the object itself, which its dict's key guard fixes).
Result<ValuePtr> keyValueOf(Tracer& t, PyObject* key);
// The real slice of a Slice of constants (Unsupported otherwise; null with an error set if
// making it failed).
Result<Ref> constantSlice(Tracer& t, const Slice& slice);

// ---- numpy.cpp: NumPy arrays as tensors, NumPy calls as torch._numpy calls ---------------
// A callable of module numpy (or a submodule): np.mean, np.linalg.norm, a ufunc, np.random.randn.
bool isNumpyCallable(PyObject* f);
// Records the torch._numpy counterpart of NumPy callable `f` (Unsupported when it has none).
Result<ValuePtr> callNumpy(Tracer& t, PyObject* f, Args& args, Kwargs& kwargs);
// x.numpy() of a tensor x: an NdArray sharing its memory.
Result<ValuePtr> tensorAsNdarray(Tracer& t, const ValuePtr& x, Args& args, Kwargs& kwargs);
// torch.from_numpy(a) / torch.as_tensor(a) of an NdArray; NotHandled when no argument is
// an NdArray (Unsupported for other torch calls given one).
Result<ValuePtr> ndarrayAsTensor(Tracer& t, PyObject* f, Args& args, Kwargs& kwargs);
Result<ValuePtr> ndarrayAttr(Tracer& t, const ValuePtr& a, PyObject* name);
Result<ValuePtr> ndarrayMethod(Tracer& t, const ValuePtr& a, PyObject* name, Args& args, Kwargs& kwargs);
// operator `op` (the operator module's name: "add", "neg", "lt", ...) with an NdArray operand.
Result<ValuePtr> ndarrayOperator(Tracer& t, const char* op, Args args);
Result<ValuePtr> ndarraySubscript(Tracer& t, const ValuePtr& a, const ValuePtr& index);

// ---- graph_calls.cpp: operations recorded in the graph ------------------------------------
// Records a graph call; `target` is a callable, or a method name with op CallMethod.
// Returns the result Value: a tensor node, a tuple of them, or a constant when the
// operation only reads metadata (static shapes).
Result<ValuePtr> recordCall(Tracer& t, graph::NodeOp op, PyObject* target, const Args& args, const Kwargs& kwargs);
// Converts a value into a graph argument (Unsupported when it cannot be one).
Done toArg(Tracer& t, const ValuePtr& v, graph::Arg* out);
// Whether two tensor values are the same Python object. Graph inputs compare their objects
// at trace time, guarded (aliasing can change).
Result<bool> sameTensorObject(Tracer& t, const ValuePtr& a, const ValuePtr& b);

}  // namespace cdynamo::trace
