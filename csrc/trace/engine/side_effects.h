// Side effects of the traced program on objects that exist outside the trace (attribute
// stores, global and nonlocal stores, mutation of input lists, dicts and sets): recorded
// in program order and replayed after the graph on every call (runtime::SideEffect).
// Later reads in the trace see the stored values through the overlays. Also counts every
// change the trace makes to state a later step could observe (see mutations()).
#pragma once
#include <Python.h>

#include <string>
#include <unordered_map>
#include <variant>
#include <vector>

#include "runtime/compiled_entry.h"
#include "trace/engine/result.h"
#include "trace/values/value.h"

namespace cdynamo::trace {

class Tracer;
class OutputPlanner;

// One recorded effect on the object in guard register `reg`.
struct Effect {
  struct SetAttr {  // setattr(target, name, value)
    Ref name;
    ValuePtr value;
    bool generic = false;  // object.__setattr__ (the class's own __setattr__ already ran in the trace)
  };
  struct SetItem {  // target[key] = value (a globals dict)
    Ref key;
    ValuePtr value;
  };
  struct DelAttr {  // delattr(target, name)
    Ref name;
    bool generic = false;  // object.__delattr__ (the class's own __delattr__ already ran in the trace)
  };
  struct SetCell {  // target.cell_contents = value
    ValuePtr value;
  };
  struct Replace {  // a list, dict or set from the program, mutated: its final contents are copied back
    ValuePtr container;
  };
  struct CallMethod {  // target.name(value), its result dropped (x.register_hook(hook) on an input tensor)
    Ref name;
    ValuePtr value;
  };
  int reg;
  std::variant<SetAttr, SetItem, DelAttr, SetCell, Replace, CallMethod> what;
};

class SideEffects {
 public:
  explicit SideEffects(Tracer& t) : t_(t) {}

  // Stores recorded for replay, seen by later reads in the trace (in program order: a
  // generator's frame runs when its items are taken).
  Done setAttr(int reg, PyObject* name, ValuePtr value, bool generic = false);
  Done setGlobal(int globals_reg, PyObject* name, ValuePtr value);
  // delattr(target, name) recorded for replay; later reads in the trace see the attribute
  // gone (overlayAttr gives deleted(), attrDeleted() is true) until it is stored again.
  Done delAttr(int reg, PyObject* name, bool generic);
  Done setCell(int cell_reg, PyObject* real_cell, ValuePtr value);
  // target.name(value) on the object in `reg`, replayed after the graph, its result dropped.
  Done callMethod(int reg, PyObject* name, ValuePtr value);
  // A mutation of container `c`: recorded (once) when it comes from the program, nothing
  // to replay when the trace made it; Unsupported for a kind that cannot be replayed.
  Done noteContainerMutation(const ValuePtr& c);
  // The containers from the program the trace has changed so far.
  std::vector<ValuePtr> replacedContainers() const;
  // Whether container `c` from the program gets its contents replaced after the graph.
  bool replaces(const Value* c) const;

  // The value last stored to attribute `name` of the object in register `reg` (or global
  // `name` of the globals dict in `reg`), deleted() when it was deleted since, or null.
  ValuePtr overlayAttr(int reg, PyObject* name) const;
  // The marker overlayAttr gives for an attribute deleted in the trace (never a value of
  // the program: every caller of overlayAttr tests for it).
  static const ValuePtr& deleted();
  bool attrDeleted(int reg, PyObject* name) const {
    return reg >= 0 && !attr_overlay_.empty() && overlayAttr(reg, name) == deleted();
  }
  bool anyAttrOverlay() const { return !attr_overlay_.empty(); }
  bool anyAttrOverlayOf(int reg) const {
    for (const auto& entry : attr_overlay_)
      if (entry.first.first == reg) return true;
    return false;
  }
  // The value stored in the trace to the real cell `cell`, or null.
  ValuePtr overlayCell(PyObject* cell) const;

  // A change to state a later step could observe (container and object mutations, effects,
  // cell stores, iterator moves). map()/filter() compare the count around their function
  // calls: those are run early, which is right only if they change nothing.
  void noteMutation() { ++mutations_; }
  uint64_t mutations() const { return mutations_; }
  // An iterator over a container moved (a mutation too): counted apart, so that a step
  // that only iterates can be told from one that changes what others see.
  void noteIteratorMove() {
    ++mutations_;
    ++moves_;
  }
  uint64_t changesBesideMoves() const { return mutations_ - moves_; }

  // A scope of values (a higher-order op's body, engine/speculation.cpp): from openScope on,
  // every change to what existed before it (the program's state, and values the trace made
  // earlier) is counted in outsideChanges(), changes to values made inside it are not.
  // Scopes nest: openScope returns the enclosing one's floor, closeScope takes it back.
  uint64_t openScope() {
    uint64_t old = floor_;
    floor_ = Value::clock() + 1;
    return old;
  }
  void closeScope(uint64_t old) { floor_ = old; }
  uint64_t outsideChanges() const { return outside_; }
  // Value `v` changes (null: something of the program's).
  void noteChangeOf(const Value* v) {
    if (floor_ && (!v || v->reg >= 0 || v->born < floor_)) ++outside_;
  }
  // The values the recorded effects store (attribute, global and cell stores, the
  // containers from the program that are replaced): what the program keeps after the frame.
  std::vector<ValuePtr> storedValues() const;

  // The replay plan of the recorded effects, in program order, their values planned by
  // `outputs` (appended to `out`).
  Done buildReplay(OutputPlanner& outputs, std::vector<runtime::SideEffect>* out) const;

 private:
  Done record(Effect e);

  Tracer& t_;
  std::vector<Effect> effects_;
  std::vector<std::pair<std::pair<int, std::string>, ValuePtr>> attr_overlay_;  // (reg, name) -> value
  std::unordered_map<PyObject*, ValuePtr> cell_overlay_;  // real cell -> value stored in the trace
  uint64_t mutations_ = 0;
  uint64_t moves_ = 0;
  uint64_t floor_ = 0;    // see openScope: 0 outside any scope
  uint64_t outside_ = 0;
};

}  // namespace cdynamo::trace
