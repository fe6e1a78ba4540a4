// The closed set of symbolic values the interpreter tracks (STYLE.md habit 5).
//
// A Value is what sits on the symbolic stack or in a symbolic local: a tensor (a graph
// node), a Python constant, a container of values, or a Python object the tracer knows
// how to treat (function, method, module, Python module). Values are shared through
// ValuePtr; containers made in the trace are the only mutable ones (list append etc.).
// `reg` is the guard register the value was read from (its Source), or -1 when the value
// was computed inside the trace.
#pragma once
#include <Python.h>

#include <memory>
#include <vector>

#include "support/pyref.h"

namespace cdynamo::trace {

enum class Kind : uint8_t {
  Null,      // the NULL of the 3.11 call convention (PUSH_NULL, LOAD_GLOBAL with bit 0)
  Tensor,    // node: graph node id
  Constant,  // obj: an immutable Python constant (None, bool, int, float, str, dtype, ...)
  Tuple,     // items
  List,      // items
  Slice,     // items: start, stop, step
  Iterator,  // items being iterated; pos: next index
  Callable,  // obj: a Python or C function, a type, or a torch function
  Method,    // items[0]: receiver; obj: function to call with the receiver first, or null
             // for a tensor method named `name`
  Module,    // obj: an nn.Module
  PyModule,  // obj: a Python module (import)
  Dict,      // keys (constants) and items (values), insertion-ordered; obj: the dict type
  Set,       // items: constant values (a set made in the trace)
  Cell,      // items: empty, or the cell's contents (closures made in the trace)
  Function,  // fn: a function made in the trace by MAKE_FUNCTION
  Object,    // obj: a user object read from the program (attributes read live, guarded)
  NewObject, // obj: the class of an object made in the trace; items[0]: its attributes (Dict)
  Super,     // obj: the class after which lookup starts (super()); items[0]: the instance
  Partial,   // functools.partial made in the trace: items = [function, args (Tuple), keywords (Dict)]
  Context,   // obj: a torch context-manager class (no_grad, autocast, ...); items: its
             // constant arguments; node: the graph node of its enter handle; pos: saved mode
};

// What MAKE_FUNCTION builds: code, defaults and closure cells as values.
struct FunctionParts;

struct Value;
using ValuePtr = std::shared_ptr<Value>;

struct Value {
  Kind kind = Kind::Null;
  int node = -1;
  Ref obj;
  Ref name;
  std::vector<ValuePtr> items;
  std::vector<Ref> keys;  // Dict: one constant key per item
  Ref ctor_arg;           // List of a deque: maxlen (or null); Dict of a defaultdict: its factory
  size_t pos = 0;
  bool ended = false;  // Iterator: its end was observed (a FOR_ITER or next() past the last item)
  int reg = -1;
  // A real object made by the trace itself (an exception instance, or a method bound to
  // one): nothing outside the trace sees it yet, so it may be changed for real.
  bool owned = false;
  std::shared_ptr<FunctionParts> fn;

  static ValuePtr null();
  static ValuePtr tensor(int node, int reg = -1);
  static ValuePtr constant(PyObject* o, int reg = -1);
  static ValuePtr sequence(Kind kind, std::vector<ValuePtr> items, int reg = -1);
  static ValuePtr object(Kind kind, PyObject* o, int reg = -1);
  static ValuePtr tensorMethod(ValuePtr receiver, PyObject* name);
  static ValuePtr boundMethod(ValuePtr receiver, PyObject* function);
  // A method of a container or tensor named `name`, called later with the receiver first.
  static ValuePtr namedMethod(ValuePtr receiver, PyObject* name) { return tensorMethod(std::move(receiver), name); }
  static ValuePtr dict(PyObject* type, std::vector<Ref> keys, std::vector<ValuePtr> values);

  // Index of `key` among a Dict's keys, -1 when absent, -2 on a comparison error.
  int findKey(PyObject* key) const;

  bool is(Kind k) const { return kind == k; }
  // The Python object this value *is* (constants, callables, modules, objects from the
  // program), or null for values that exist only in the trace (tensors, containers and
  // objects made in the trace — whose `obj` holds their type, not themselves).
  PyObject* real() const {
    switch (kind) {
      case Kind::Constant:
      case Kind::Callable:
      case Kind::Module:
      case Kind::PyModule:
      case Kind::Object:
        return obj.get();
      default:
        return nullptr;
    }
  }
};

struct FunctionParts {
  Ref code;
  Ref qualname;
  Borrowed globals;              // borrowed from the frame that made it (its function keeps them)
  Borrowed builtins;
  ValuePtr defaults;             // Tuple or null
  ValuePtr kwdefaults;           // Dict or null
  std::vector<ValuePtr> closure; // Cell values
  ValuePtr attrs;                // Dict of attributes set in the trace (functools.wraps), or null
};

// Readable kind name for messages.
const char* kindName(Kind k);
// True when `o` is a Python value the tracer models as a Constant.
bool isConstantObject(PyObject* o);

}  // namespace cdynamo::trace
