// Handlers of locals, constants, globals, attributes, imports and the stack (handlers.h).
#include <string>

#include "support/lookup.h"
#include "trace/opcodes/handlers.h"
#include "trace/protocol/attributes.h"
#include "trace/tracer.h"

namespace cdynamo::trace {

namespace {

PyObject* constantArg(const SymbolicFrame& f, const bytecode::Instruction& ins) {
  return PyTuple_GET_ITEM(f.code->co_consts, ins.arg);
}
PyObject* nameArg(const SymbolicFrame& f, int index) { return PyTuple_GET_ITEM(f.code->co_names, index); }

// The value of `r`, placed as the instruction's only output.
Result<Next> give(Result<ValuePtr> r, Values& io) {
  if (!r) return r.stop();
  io.assign(1, r.take());
  return Next::Fall;
}

}  // namespace

Result<Next> opNothing(Tracer&, SymbolicFrame&, const bytecode::Instruction&, Values&) { return Next::Fall; }

Result<Next> opLoadFast(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io) {
  const int arg = ins.arg;
  ValuePtr v = f.locals[arg];
  if (!v && f.root && !f.deleted[arg]) {
    Result<ValuePtr> r = t.loadRootLocal(f, arg);
    if (!r && !r.notHandled()) return r.stop();
    if (r) v = r.take();
  }
  if (!v) return t.fail("local variable referenced before assignment (UnboundLocalError)");
  io.assign(1, std::move(v));
  return Next::Fall;
}

Result<Next> opStoreFast(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io) {
  if (io[0]->is(Kind::Null)) {  // 3.12: a comprehension restoring a local that was unbound
    f.locals[ins.arg] = nullptr;
    if (f.root) f.deleted[ins.arg] = 1;
    io.clear();
    return Next::Fall;
  }
  t.noteStored(io[0], PyTuple_GET_ITEM(f.code->co_localsplusnames, ins.arg));
  f.locals[ins.arg] = std::move(io[0]);
  io.clear();
  return Next::Fall;
}

Result<Next> opDeleteFast(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values&) {
  const int arg = ins.arg;
  if (!f.locals[arg]) {
    Result<ValuePtr> r = f.root && !f.deleted[arg] ? t.loadRootLocal(f, arg) : Result<ValuePtr>(notHandled());
    if (!r && !r.notHandled()) return r.stop();
    if (!r) return t.fail("deleting an unbound local variable (UnboundLocalError)");
  }
  f.locals[arg] = nullptr;
  if (f.root) f.deleted[arg] = 1;
  return Next::Fall;
}

Result<Next> opLoadConst(Tracer&, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io) {
  io.assign(1, Value::constant(constantArg(f, ins)));
  return Next::Fall;
}

Result<Next> opLoadGlobal(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io) {
  Result<ValuePtr> v = t.loadGlobal(f, nameArg(f, ins.arg >> 1));
  if (!v) return v.stop();
  io.clear();
  if (ins.arg & 1) io.push_back(Value::null());
  io.push_back(v.take());
  return Next::Fall;
}

Result<Next> opStoreGlobal(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io) {
  int reg = t.load(guards::LoadKind::Constant, -1, 0, f.globals.get(), "globals");
  if (Done d = t.effects().setGlobal(reg, nameArg(f, ins.arg), io[0]); !d) return d.stop();
  io.clear();
  return Next::Fall;
}

Result<Next> opLoadAttr(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io) {
  return give(getAttr(t, io[0], nameArg(f, ins.arg)), io);
}

Result<Next> opLoadMethod(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io) {
  // Pushed as [NULL, bound callable]: the call handler does not need the unbound-method
  // form, and both layouts call the same thing.
  Result<ValuePtr> v = getAttr(t, io[0], nameArg(f, ins.arg));
  if (!v) return v.stop();
  io = {Value::null(), v.take()};
  return Next::Fall;
}

Result<Next> opStoreAttr(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io) {
  // Stack: value, object.
  if (Done d = storeAttr(t, io[1], nameArg(f, ins.arg), io[0]); !d) return d.stop();
  io.clear();
  return Next::Fall;
}

Result<Next> opDeleteAttr(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io) {
  // Stack: object.
  if (Done d = deleteAttr(t, io[0], nameArg(f, ins.arg)); !d) return d.stop();
  io.clear();
  return Next::Fall;
}

Result<Next> opImportName(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io) {
  // `import m` of a module that is already imported (the common case inside forward): the
  // statement only reads sys.modules, so it is evaluated now. A first import runs module
  // code and is left to CPython.
  const ValuePtr& level = io[0];
  const ValuePtr& fromlist = io[1];
  PyObject* name = nameArg(f, ins.arg);
  PyObject* modules = PyImport_GetModuleDict();
  if (!level->is(Kind::Constant) || PyLong_AsLong(level->constant()) != 0 || !fromlist->is(Kind::Constant))
    return t.fail("relative imports inside the trace are not supported yet");
  if (!PyDict_GetItemWithError(modules, name)) {
    if (PyErr_Occurred()) return t.failFromPython("sys.modules");
    return t.fail("an import that would load a new module");
  }
  Ref mod = Ref::steal(PyImport_ImportModuleLevelObject(name, f.globals.get(), nullptr, fromlist->constant(), 0));
  if (!mod) return t.raisePython();
  io.assign(1, Value::of(PyModule{mod.copy()}));
  return Next::Fall;
}

Result<Next> opImportFrom(Tracer& t, SymbolicFrame& f, const bytecode::Instruction& ins, Values& io) {
  Result<ValuePtr> v = getAttr(t, io[0], nameArg(f, ins.arg));
  if (!v) return v.stop();
  io.push_back(v.take());  // the module stays
  return Next::Fall;
}

Result<Next> opLoadAssertionError(Tracer&, SymbolicFrame&, const bytecode::Instruction&, Values& io) {
  io.assign(1, Value::callable(PyExc_AssertionError));
  return Next::Fall;
}

Result<Next> opPushNull(Tracer&, SymbolicFrame&, const bytecode::Instruction&, Values& io) {
  io.assign(1, Value::null());
  return Next::Fall;
}

Result<Next> opPopTop(Tracer&, SymbolicFrame&, const bytecode::Instruction&, Values& io) {
  io.clear();
  return Next::Fall;
}

Result<Next> opCopy(Tracer&, SymbolicFrame&, const bytecode::Instruction&, Values& io) {
  io.push_back(io.front());  // COPY n: the n-th item from the top, again on top
  return Next::Fall;
}

Result<Next> opSwap(Tracer&, SymbolicFrame&, const bytecode::Instruction&, Values& io) {
  std::swap(io.front(), io.back());
  return Next::Fall;
}

}  // namespace cdynamo::trace
