// The closed set of symbolic values the interpreter tracks (docs/architecture.md, "What the interpreter models").
//
// A Value is what sits on the symbolic stack or in a symbolic local: a tensor (a graph
// node), a Python constant, a container of values, or a Python object the tracer knows
// how to treat (function, method, module, Python module, user object). Each kind carries
// its own payload struct (the kinds listed in kinds.def, one struct each, below): no field
// means different things for different kinds. Values are shared through ValuePtr; those
// made in the trace (containers, objects, cells, iterators) are mutated in place.
//
// Dispatch on a kind is exhaustive by construction: `switch (v->kind())` without a
// default (-Werror=switch), or std::visit over `v->payload` with one overload per
// payload; either fails to compile until a new kind is handled. Typed access to one kind
// is `v->get<List>()` (null when `v` is another kind) or `v->as<List>()` (checked).
//
// `reg` is the guard register the value was read from (its Source), or -1 when the value
// was computed inside the trace; it applies to every kind.
#pragma once
#include <Python.h>

#include <array>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "support/check.h"
#include "support/pyref.h"

namespace cdynamo::trace {

struct Value;
using ValuePtr = std::shared_ptr<Value>;
struct GeneratorState;  // trace/frame.h: a generator frame made in the trace, paused at a yield

// ---- the payloads, one per kind --------------------------------------------------------

// The NULL of the 3.11 call convention (PUSH_NULL, LOAD_GLOBAL with bit 0).
struct Null {};
// A graph node's result: a tensor, or a number read from one (trace/scalars.h).
struct Tensor {
  int node = -1;
};
// An immutable Python constant (None, bool, int, float, str, dtype, Size, tuple of those).
struct Constant {
  Ref obj;
};
struct Tuple {
  std::vector<ValuePtr> items;
  Ref namedtuple;  // the namedtuple class of a namedtuple, or null for a plain tuple
  // A namedtuple made in the trace whose class gives instances a __dict__ (a subclass
  // without __slots__): the attributes set on it (a Dict keyed by name), or null for none.
  ValuePtr attrs;
};
struct List {
  std::vector<ValuePtr> items;
  Ref deque;   // collections.deque when the list models a deque, or null
  Ref maxlen;  // a deque's maxlen (an int), or null for none
  // A deque's count of the changes CPython's deque counts (appends, pops, inserts, removals,
  // rotations, a clear of a non-empty one; not d[i] = v nor reverse()): an iterator over it
  // raises once this moved since iter(), even past its end (dequeChanged).
  uint64_t state = 0;
};
inline void dequeChanged(List& l) {
  if (l.deque) ++l.state;
}
struct Slice {
  std::array<ValuePtr, 3> parts;  // start, stop, step
};
struct Iterator {
  std::vector<ValuePtr> items;  // everything it yields
  size_t pos = 0;               // the next item
  bool ended = false;           // its end was observed (a FOR_ITER or next() past the last item)
  // The Python type of the iterator it stands for (list_iterator, range_iterator, map, zip,
  // generator, ...): what type()/isinstance answer and what the output plan rebuilds; null
  // when not known.
  Ref type;
  // A user object whose __next__ gives the items one at a time (its class's __iter__
  // returned it), or null: the items are then `items`, known ahead.
  ValuePtr stepper;
  // map(fn, *sources), zip(*sources) or enumerate(source, start) over a source made item
  // by item, taken lazily as Python's are: each item is made from the next item of every
  // source when it is taken (fn may read what the program changed since the previous one).
  // filter(fn, source) over a source made item by item: the source is stepped until fn
  // accepts an item (None: until an item is true).
  // Generator: a generator made in the trace; its frame runs to the next yield each time an
  // item is taken (what it does in between happens in the program's order).
  // Sequence: iter()/reversed() of a list, dict (or view) or set made or read in the trace:
  // each item is read from the container as it is when taken (a list grown or changed after
  // iter() is seen as Python's list_iterator sees it; a dict or set that changed size raises).
  enum class Made : uint8_t { Ahead, Map, Zip, Enumerate, Filter, Generator, Sequence };
  Made made = Made::Ahead;
  ValuePtr map_fn;                   // Map, Filter: the function
  std::vector<ValuePtr> map_sources;  // Iterators
  long next_index = 0;                // Enumerate: the next count
  std::shared_ptr<GeneratorState> gen;  // Generator
  ValuePtr seq;                       // Sequence: the container (List, Dict, Set)
  size_t seq_len = 0;                 // Sequence: its length when iter() was called
  uint8_t seq_which = 0;              // Sequence over a dict: DictView::Which (keys, values, items)
  bool seq_reversed = false;          // Sequence: reversed() of a list
  // Sequence over a dict or set: its keys / items when iter() was called; a change of them
  // that keeps the size is not modeled (the trace fails rather than guess Python's order).
  std::vector<Ref> seq_keys;
  std::vector<ValuePtr> seq_items;
  // A Sequence iterator whose items were then made known ahead (drainUserIterator): its
  // pos in the container when they were, so the drained items begin there.
  size_t seq_base = 0;
  uint64_t seq_state = 0;             // Sequence over a deque: its List::state at iter()
  // Whether its items are made one at a time when taken (not known ahead).
  bool lazy() const { return stepper || made != Made::Ahead; }
};
// A Python or C function, a type, or a torch function, called by identity.
struct Callable {
  Ref obj;
  // A C method bound to an object the trace made for real (BaseException.__init__): it
  // may run for real, on constants.
  bool owned = false;
};
// `function` called with `self` first (types.MethodType).
struct BoundMethod {
  ValuePtr self;
  Ref function;
  int function_reg = -1;  // guard register of the function (a class attribute), or -1
};
// The method `name` of a container, tensor or context value, looked up when called.
struct NamedMethod {
  ValuePtr self;
  Ref name;
};
struct Module {
  Ref obj;  // an nn.Module read from the program
};
struct PyModule {
  Ref obj;  // a Python module
};
// keys (constants) and values, insertion-ordered.
struct Dict {
  Ref type;                      // dict, OrderedDict, defaultdict (or a dict subclass read from the program)
  std::vector<Ref> keys;
  std::vector<ValuePtr> values;  // one per key
  Ref default_factory;           // a defaultdict's factory, or null
  // A defaultdict's factory as a value: one made in the trace (a lambda, a closure; then
  // default_factory is null), or the one a dict read from the program holds (read through
  // it). Called when a key is missing. hasFactory(): either field.
  ValuePtr factory_value;
  bool hasFactory() const { return default_factory || factory_value; }
  // Index of `key` among the keys, -1 when absent, -2 on a comparison error (set).
  int findKey(PyObject* key) const;
};
// A set or frozenset made in the trace, in the order its items were added (the order a
// set built by adding them would iterate in is computed where it matters: iteration).
struct Set {
  std::vector<ValuePtr> items;  // constants, modules, tensors (by identity) or frozen Sets
  bool frozen = false;          // a frozenset (immutable, hashable) holding values made in the trace
  // Python walks a set in its table's order, which its history decides (removals leave
  // dummies, pop() moves a finger, update() may resize first): once it is changed, a real
  // set of its real items replays each change (containers.cpp, setShadow). Null before;
  // `shadow_lost` when an item or an argument has no real object (the order is then
  // rebuilt from the items, as for a set never changed).
  Ref shadow;
  bool shadow_lost = false;
};
// A closure cell made in the trace.
struct Cell {
  ValuePtr contents;  // null while empty
  Ref outer;          // the real cell of an enclosing function this one models (stores go to it), or null
};
// A function made in the trace by MAKE_FUNCTION: code, defaults and closure as values.
struct Function {
  Ref code;
  Ref qualname;
  Borrowed globals;               // of the frame that made it (its function keeps them alive)
  Borrowed builtins;
  ValuePtr defaults;              // Tuple, or null
  ValuePtr kwdefaults;            // Dict, or null
  std::vector<ValuePtr> closure;  // Cell values
  ValuePtr attrs;                 // Dict of attributes set in the trace (functools.wraps), or null
  // __annotations__: MAKE_FUNCTION's operand (a Tuple of name, value pairs) until first read,
  // then the Dict every read returns (one object, as CPython's getter makes it once); or null.
  ValuePtr annotations;
};
// A user object read from the program (attributes read live, guarded), or an object the
// trace made for real (an exception instance).
struct Object {
  Ref obj;
  bool owned = false;  // made by the trace itself: nothing outside sees it yet, so it may be changed for real
  ValuePtr base;       // a dict subclass instance's own items (a Dict read from it), or null
};
// An object of a user class made in the trace.
struct NewObject {
  Ref cls;
  ValuePtr attrs;  // a Dict: its __dict__
  ValuePtr base;   // an instance of a dict/OrderedDict subclass: its items (a Dict), or null
};
// super(): attribute lookup on `self` starting after `after` in its MRO.
struct Super {
  Ref after;
  ValuePtr self;
};
// functools.partial made in the trace, or a function decorated with a context manager.
struct Partial {
  ValuePtr fn;
  ValuePtr args;     // Tuple
  ValuePtr kwargs;   // Dict
  ValuePtr context;  // a Context to enter around each call (a decorator), or null
};
// A torch context manager (no_grad, enable_grad, set_grad_enabled, inference_mode, autocast).
struct Context {
  Ref cls;
  std::vector<ValuePtr> args;  // its constant arguments by position (null where not given)
  int enter_node = -1;         // the graph node of its enter handle (inference_mode, autocast)
  bool saved_grad_mode = false;  // the grad mode to restore on exit (grad-mode contexts; set on entry)
  // The state to restore on exit of a state context (disable_saved_tensors_hooks: the
  // message in force when it was made, None when hooks were enabled).
  Ref saved_state;
};
// A types.SimpleNamespace made in the trace: its attributes, as a plain Dict keyed by name.
struct Namespace {
  ValuePtr attrs;
};

// d.keys(), d.values() or d.items(): a live view of the Dict value `dict` (every use
// reads the dict as it is then).
struct DictView {
  enum Which : uint8_t { Keys, Values, Items };
  ValuePtr dict;
  Which which = Keys;
};

// A NumPy array of the program, held in the graph as a tensor (node `node`, its data):
// NumPy operations on it are recorded as torch._numpy calls (trace/numpy.cpp), and it is
// made a real ndarray again when it leaves the trace.
struct NdArray {
  int node = -1;
};

// An instance of a Python subclass of torch.Tensor (one that does not override
// __torch_dispatch__), held in the graph as the plain tensor `node`: every torch function,
// Tensor method and attribute applied to it goes through its class's __torch_function__
// (trace/torch_function.cpp), and it is made an instance of `cls` again (as_subclass) when
// it leaves the trace. `reg` >= 0: the very object read from the program.
struct SubclassTensor {
  int node = -1;
  Ref cls;
};

// ---- the value -------------------------------------------------------------------------

enum class Kind : uint8_t {
#define KIND(name, text) name,
#include "trace/values/kinds.def"
#undef KIND
};

struct Value {
  // In the order of kinds.def (checked below).
  using Payload = std::variant<Null, Tensor, Constant, Tuple, List, Slice, Iterator, Callable, BoundMethod,
                               NamedMethod, Module, PyModule, Dict, Set, Cell, Function, Object, NewObject, Super,
                               Partial, Context, Namespace, DictView, NdArray, SubclassTensor>;

  Payload payload;
  int reg = -1;
  // When the value was made, on a clock every Value::of ticks: a step can tell the values
  // made after a point (a higher-order op's body, SideEffects::openScope) from those before.
  uint64_t born = 0;
  static uint64_t& clock() {
    static uint64_t ticks = 0;
    return ticks;
  }

  Kind kind() const { return static_cast<Kind>(payload.index()); }
  bool is(Kind k) const { return kind() == k; }
  template <class P>
  P* get() {
    return std::get_if<P>(&payload);
  }
  template <class P>
  const P* get() const {
    return std::get_if<P>(&payload);
  }
  template <class P>
  P& as() {
    P* p = get<P>();
    CDYNAMO_CHECK(p != nullptr, "a value of another kind");
    return *p;
  }
  template <class P>
  const P& as() const {
    const P* p = get<P>();
    CDYNAMO_CHECK(p != nullptr, "a value of another kind");
    return *p;
  }

  // The Python object this value *is* (constants, callables, modules, objects from the
  // program), or null for values that exist only in the trace.
  PyObject* real() const;
  // The constant's object when this is a Constant, else null.
  PyObject* constant() const {
    const Constant* c = get<Constant>();
    return c ? c->obj.get() : nullptr;
  }
  bool isNone() const { return constant() == Py_None; }
  // The items of a Tuple, List, Set or Iterator (all of an iterator's, taken or not), or
  // null for any other kind.
  const std::vector<ValuePtr>* elements() const;
  std::vector<ValuePtr>* elements() { return const_cast<std::vector<ValuePtr>*>(std::as_const(*this).elements()); }

  // ---- construction ----
  template <class P>
  static ValuePtr of(P payload, int reg = -1) {
    auto v = std::make_shared<Value>();
    v->payload = std::move(payload);
    v->reg = reg;
    v->born = ++clock();
    return v;
  }
  static ValuePtr null() { return of(Null{}); }
  static ValuePtr tensor(int node, int reg = -1) { return of(Tensor{node}, reg); }
  static ValuePtr constant(PyObject* o, int reg = -1) { return of(Constant{Ref::borrow(o)}, reg); }
  static ValuePtr tuple(std::vector<ValuePtr> items, int reg = -1) { return of(Tuple{std::move(items), Ref(), nullptr}, reg); }
  static ValuePtr list(std::vector<ValuePtr> items, int reg = -1) { return of(List{std::move(items), Ref(), Ref()}, reg); }
  static ValuePtr set(std::vector<ValuePtr> items, int reg = -1) { return of(Set{std::move(items), false}, reg); }
  static ValuePtr frozenSet(std::vector<ValuePtr> items) { return of(Set{std::move(items), true}); }
  static ValuePtr iterator(std::vector<ValuePtr> items, int reg = -1) {
    return of(Iterator{std::move(items), 0, false, Ref(), nullptr, Iterator::Made::Ahead, nullptr, {}, 0}, reg);
  }
  // An iterator of Python type `type` (borrowed; may be null) over `items`.
  static ValuePtr iterator(std::vector<ValuePtr> items, PyObject* type, int reg = -1) {
    return of(Iterator{std::move(items), 0, false, Ref::borrow(type), nullptr, Iterator::Made::Ahead, nullptr, {}, 0}, reg);
  }
  static ValuePtr callable(PyObject* o, int reg = -1) { return of(Callable{Ref::borrow(o), false}, reg); }
  static ValuePtr object(PyObject* o, int reg = -1) { return of(Object{Ref::borrow(o), false}, reg); }
  static ValuePtr boundMethod(ValuePtr self, PyObject* function, int function_reg = -1) {
    return of(BoundMethod{std::move(self), Ref::borrow(function), function_reg});
  }
  // A method of a container, tensor or context named `name`, called later with the receiver first.
  static ValuePtr namedMethod(ValuePtr self, PyObject* name) { return of(NamedMethod{std::move(self), Ref::borrow(name)}); }
  static ValuePtr dict(PyObject* type, std::vector<Ref> keys, std::vector<ValuePtr> values, int reg = -1) {
    return of(Dict{Ref::borrow(type), std::move(keys), std::move(values), Ref()}, reg);
  }
  // An empty plain dict made in the trace.
  static ValuePtr emptyDict() { return dict(reinterpret_cast<PyObject*>(&PyDict_Type), {}, {}); }
  // A Tuple, List, Set or Iterator (`kind`) of `items`.
  static ValuePtr sequence(Kind kind, std::vector<ValuePtr> items, int reg = -1);
};

#define KIND(name, text)                                                                               \
  static_assert(std::is_same_v<std::variant_alternative_t<static_cast<size_t>(Kind::name), Value::Payload>, name>, \
                "Value::Payload lists the kinds in the order of kinds.def");
#include "trace/values/kinds.def"
#undef KIND
#define KIND(name, text) +1
static_assert(std::variant_size_v<Value::Payload> == 0
#include "trace/values/kinds.def"
              , "one payload per kind");
#undef KIND

// The values a value holds directly (items, dict values, a method's receiver, a cell's
// contents, ...), in order; nulls skipped.
template <class F>
void forEachChild(const Value& v, F&& f);
// The values a paused generator frame holds (its locals and stack; functions.cpp).
std::vector<ValuePtr> generatorValues(const GeneratorState& g);

// Readable kind name for messages.
const char* kindName(Kind k);
// The value for a message, with its article: "a tensor", "an iterator", "an object of type
// types.UnionType" (an object's or a constant's own type named).
std::string describe(const ValuePtr& v);
// True when `o` is a Python value the tracer models as a Constant.
bool isConstantObject(PyObject* o);
// A NumPy dtype or scalar (np.dtype("float32"), np.float64(0.5)): constants.
bool isNumpyConstant(PyObject* o);
// A member of an enum.Enum class (a constant, compared by identity).
bool isEnumMember(PyObject* o);

// ---- inline definitions ----------------------------------------------------------------

template <class F>
void forEachChild(const Value& v, F&& f) {
  auto each = [&](const ValuePtr& c) {
    if (c) f(c);
  };
  auto all = [&](const std::vector<ValuePtr>& items) {
    for (const ValuePtr& c : items) each(c);
  };
  switch (v.kind()) {
    case Kind::Tuple:
      all(v.as<Tuple>().items);
      return each(v.as<Tuple>().attrs);
    case Kind::List: return all(v.as<List>().items);
    case Kind::Set: return all(v.as<Set>().items);
    case Kind::Iterator:
      all(v.as<Iterator>().items);
      all(v.as<Iterator>().map_sources);
      each(v.as<Iterator>().map_fn);
      each(v.as<Iterator>().seq);
      if (v.as<Iterator>().gen)
        for (const ValuePtr& c : generatorValues(*v.as<Iterator>().gen)) each(c);
      return each(v.as<Iterator>().stepper);
    case Kind::Dict:
      each(v.as<Dict>().factory_value);
      return all(v.as<Dict>().values);
    case Kind::Context: return all(v.as<Context>().args);
    case Kind::Slice:
      for (const ValuePtr& c : v.as<Slice>().parts) each(c);
      return;
    case Kind::BoundMethod: return each(v.as<BoundMethod>().self);
    case Kind::NamedMethod: return each(v.as<NamedMethod>().self);
    case Kind::Cell: return each(v.as<Cell>().contents);
    case Kind::NewObject: return each(v.as<NewObject>().attrs);
    case Kind::Namespace: return each(v.as<Namespace>().attrs);
    case Kind::Super: return each(v.as<Super>().self);
    case Kind::DictView: return each(v.as<DictView>().dict);
    case Kind::Partial: {
      const Partial& p = v.as<Partial>();
      each(p.fn);
      each(p.args);
      each(p.kwargs);
      each(p.context);
      return;
    }
    case Kind::Function:
    case Kind::Null:
    case Kind::Tensor:
    case Kind::Constant:
    case Kind::Callable:
    case Kind::Module:
    case Kind::PyModule:
    case Kind::Object:
    case Kind::NdArray:
    case Kind::SubclassTensor:
      return;
  }
}

}  // namespace cdynamo::trace
