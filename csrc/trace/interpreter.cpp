// The opcode loop: one case per base opcode of CPython 3.11. Handlers pop their inputs,
// call an operation of the Tracer (calls.cpp, ops.cpp) that states the meaning, and push
// the result. An opcode not handled here stops the trace with a named reason.
#include <string>

#include "support/check.h"
#include "trace/tracer.h"

namespace cdynamo::trace {

using bytecode::Op;

namespace {

ValuePtr pop(SymbolicFrame& f) {
  CDYNAMO_CHECK(!f.stack.empty(), "symbolic stack underflow");
  ValuePtr v = std::move(f.stack.back());
  f.stack.pop_back();
  return v;
}

std::vector<ValuePtr> popN(SymbolicFrame& f, size_t n) {
  CDYNAMO_CHECK(f.stack.size() >= n, "symbolic stack underflow");
  std::vector<ValuePtr> out(f.stack.end() - n, f.stack.end());
  f.stack.resize(f.stack.size() - n);
  return out;
}

bool isNoneValue(const ValuePtr& v) { return v->is(Kind::Constant) && v->obj.get() == Py_None; }

}  // namespace

ValuePtr Tracer::runFrame(SymbolicFrame& f) {
  SymbolicFrame* saved = current_;
  current_ = &f;
  struct Restore {
    Tracer* t;
    SymbolicFrame* saved;
    ~Restore() { t->current_ = saved; }
  } restore{this, saved};

  PyObject* consts = f.code->co_consts;
  PyObject* names = f.code->co_names;
  // Jumps name code-unit offsets; map them to instruction indices.
  auto jumpTo = [&](int offset) -> bool {
    int idx = bytecode::indexAtOffset(f.instrs, offset);
    if (idx < 0) {
      fail("jump to an offset that is not an instruction start");
      return false;
    }
    f.pc = static_cast<size_t>(idx);
    return true;
  };

  while (f.pc < f.instrs.size()) {
    if (++instructions_run_ > kMaxInstructions) return fail("trace is too long (instruction budget exhausted)");
    const bytecode::Instruction& ins = f.instrs[f.pc];
    size_t next_pc = f.pc + 1;
    const int arg = ins.arg;
    switch (ins.op) {
      case Op::NOP:
      case Op::RESUME:
      case Op::PRECALL:
      case Op::CACHE:
      case Op::EXTENDED_ARG:
      case Op::COPY_FREE_VARS:  // free variables are read lazily from the closure
        break;

      case Op::LOAD_FAST:
      case Op::LOAD_CLOSURE: {
        ValuePtr v = f.locals[arg];
        if (!v && f.root) v = loadRootLocal(f, arg);
        if (!v) {
          if (failed_) return nullptr;
          return fail("local variable referenced before assignment (UnboundLocalError)");
        }
        f.stack.push_back(std::move(v));
        break;
      }
      case Op::STORE_FAST:
        f.locals[arg] = pop(f);
        break;
      case Op::DELETE_FAST:
        f.locals[arg] = nullptr;
        break;
      case Op::LOAD_DEREF: {
        // Free variables only (cells made in the trace come with closures support).
        int nfree = static_cast<int>(f.code->co_nfreevars);
        int first_free = f.code->co_nlocalsplus - nfree;
        if (arg < first_free) return fail("LOAD_DEREF of a cell variable is not supported yet");
        int j = arg - first_free;
        if (f.locals[arg]) {
          f.stack.push_back(f.locals[arg]);
          break;
        }
        if (!f.closure || j >= PyTuple_GET_SIZE(f.closure)) return fail("free variable without a closure");
        PyObject* cell = PyTuple_GET_ITEM(f.closure, j);
        PyObject* contents = PyCell_GET(cell);
        if (!contents) return fail("free variable referenced before assignment");
        PyObject* varname = PyTuple_GET_ITEM(f.code->co_localsplusnames, arg);
        int reg = -1;
        if (f.root) {
          reg = load(guards::LoadKind::ClosureCell, -1, j, nullptr,
                     std::string("closure['") + PyUnicode_AsUTF8(varname) + "']");
        } else if (f.function_reg >= 0) {
          int clo = load(guards::LoadKind::Attr, f.function_reg, 0, intern("__closure__"),
                         guards().sourceName(f.function_reg) + ".__closure__");
          int cellreg = load(guards::LoadKind::TupleItem, clo, j, nullptr,
                             guards().sourceName(clo) + "[" + std::to_string(j) + "]");
          reg = load(guards::LoadKind::Attr, cellreg, 0, intern("cell_contents"),
                     guards().sourceName(cellreg) + ".cell_contents");
        }
        ValuePtr v = wrap(contents, reg);
        if (!v) return nullptr;
        f.locals[arg] = v;
        f.stack.push_back(std::move(v));
        break;
      }
      case Op::LOAD_CONST:
        f.stack.push_back(Value::constant(PyTuple_GET_ITEM(consts, arg)));
        break;
      case Op::LOAD_GLOBAL: {
        PyObject* name = PyTuple_GET_ITEM(names, arg >> 1);
        if (arg & 1) f.stack.push_back(Value::null());
        ValuePtr v = loadGlobal(f, name);
        if (!v) return nullptr;
        f.stack.push_back(std::move(v));
        break;
      }
      case Op::LOAD_ATTR: {
        ValuePtr obj = pop(f);
        ValuePtr v = getAttr(obj, PyTuple_GET_ITEM(names, arg));
        if (!v) return nullptr;
        f.stack.push_back(std::move(v));
        break;
      }
      case Op::LOAD_METHOD: {
        // Pushed as [NULL, bound callable]: the call handler does not need the
        // unbound-method form, and both layouts call the same thing.
        ValuePtr obj = pop(f);
        ValuePtr v = getAttr(obj, PyTuple_GET_ITEM(names, arg));
        if (!v) return nullptr;
        f.stack.push_back(Value::null());
        f.stack.push_back(std::move(v));
        break;
      }
      case Op::PUSH_NULL:
        f.stack.push_back(Value::null());
        break;
      case Op::KW_NAMES:
        f.kwnames = Ref::borrow(PyTuple_GET_ITEM(consts, arg));
        break;
      case Op::CALL: {
        // Stack: [callable_or_NULL, self_or_callable, arg1 .. argN] (3.11 convention).
        std::vector<ValuePtr> args = popN(f, static_cast<size_t>(arg));
        ValuePtr second = pop(f);
        ValuePtr first = pop(f);
        ValuePtr fn;
        if (first->is(Kind::Null)) {
          fn = second;
        } else {
          fn = first;
          args.insert(args.begin(), second);
        }
        std::vector<std::pair<Ref, ValuePtr>> kwargs;
        if (f.kwnames) {
          Py_ssize_t nk = PyTuple_GET_SIZE(f.kwnames.get());
          size_t npos = args.size() - static_cast<size_t>(nk);
          for (Py_ssize_t k = 0; k < nk; ++k)
            kwargs.emplace_back(Ref::borrow(PyTuple_GET_ITEM(f.kwnames.get(), k)), args[npos + k]);
          args.resize(npos);
          f.kwnames.reset();
        }
        ValuePtr r = call(fn, std::move(args), std::move(kwargs));
        if (!r) return nullptr;
        f.stack.push_back(std::move(r));
        break;
      }
      case Op::BINARY_OP: {
        ValuePtr b = pop(f);
        ValuePtr a = pop(f);
        ValuePtr r = binaryOp(arg, a, b);
        if (!r) return nullptr;
        f.stack.push_back(std::move(r));
        break;
      }
      case Op::UNARY_POSITIVE:
      case Op::UNARY_NEGATIVE:
      case Op::UNARY_NOT:
      case Op::UNARY_INVERT: {
        ValuePtr a = pop(f);
        ValuePtr r = unaryOp(ins.op, a);
        if (!r) return nullptr;
        f.stack.push_back(std::move(r));
        break;
      }
      case Op::COMPARE_OP: {
        ValuePtr b = pop(f);
        ValuePtr a = pop(f);
        ValuePtr r = compareOp(arg, a, b);
        if (!r) return nullptr;
        f.stack.push_back(std::move(r));
        break;
      }
      case Op::IS_OP: {
        ValuePtr b = pop(f);
        ValuePtr a = pop(f);
        int same;
        auto hasObj = [](const ValuePtr& v) {
          return v->obj && !v->is(Kind::Method) && !v->is(Kind::Tensor);
        };
        if (hasObj(a) && hasObj(b)) {
          same = a->obj.get() == b->obj.get();
        } else if (a->is(Kind::Tensor) && b->is(Kind::Tensor)) {
          if (a->node != b->node) return fail("identity of two distinct tensors is not known at trace time");
          same = 1;
        } else if ((hasObj(a) && a->is(Kind::Constant)) || (hasObj(b) && b->is(Kind::Constant))) {
          same = 0;  // a constant is never the same object as a tensor or container
        } else {
          return fail(std::string("`is` between ") + kindName(a->kind) + " and " + kindName(b->kind));
        }
        f.stack.push_back(Value::constant((same != arg) ? Py_True : Py_False));
        break;
      }
      case Op::CONTAINS_OP: {
        ValuePtr container = pop(f);
        ValuePtr item = pop(f);
        if (!container->is(Kind::Constant) || !item->is(Kind::Constant))
          return fail("`in` on values other than constants is not supported yet");
        int r = PySequence_Contains(container->obj.get(), item->obj.get());
        if (r < 0) return failFromPython("`in` on constants");
        f.stack.push_back(Value::constant((r != arg) ? Py_True : Py_False));
        break;
      }
      case Op::BINARY_SUBSCR: {
        ValuePtr index = pop(f);
        ValuePtr obj = pop(f);
        ValuePtr r = subscript(obj, index);
        if (!r) return nullptr;
        f.stack.push_back(std::move(r));
        break;
      }
      case Op::STORE_SUBSCR: {
        ValuePtr index = pop(f);
        ValuePtr obj = pop(f);
        ValuePtr value = pop(f);
        if (!obj->is(Kind::Tensor)) return fail("item assignment on non-tensors is not supported yet");
        PyObject* setitem = PyObject_GetAttrString(PyImport_AddModule("_operator"), "setitem");
        Ref setitem_ref = Ref::steal(setitem);
        if (!setitem) return failFromPython("operator.setitem");
        ValuePtr r = recordCall(graph::NodeOp::CallFunction, setitem, {obj, index, value}, {});
        if (!r) return nullptr;
        break;
      }
      case Op::BUILD_TUPLE:
      case Op::BUILD_LIST:
        f.stack.push_back(Value::sequence(ins.op == Op::BUILD_TUPLE ? Kind::Tuple : Kind::List,
                                          popN(f, static_cast<size_t>(arg))));
        break;
      case Op::LIST_TO_TUPLE: {
        ValuePtr l = pop(f);
        if (!l->is(Kind::List)) return fail("LIST_TO_TUPLE on a non-list");
        f.stack.push_back(Value::sequence(Kind::Tuple, l->items));
        break;
      }
      case Op::LIST_EXTEND: {
        ValuePtr seq = pop(f);
        ValuePtr& list = f.stack[f.stack.size() - static_cast<size_t>(arg)];
        ValuePtr it = getIter(seq);
        if (!it) return nullptr;
        for (const ValuePtr& v : it->items) list->items.push_back(v);
        break;
      }
      case Op::BUILD_SLICE: {
        std::vector<ValuePtr> parts = popN(f, static_cast<size_t>(arg));
        if (parts.size() == 2) parts.push_back(Value::constant(Py_None));
        f.stack.push_back(Value::sequence(Kind::Slice, std::move(parts)));
        break;
      }
      case Op::UNPACK_SEQUENCE: {
        ValuePtr seq = pop(f);
        ValuePtr it = getIter(seq);
        if (!it) return nullptr;
        if (it->items.size() != static_cast<size_t>(arg))
          return fail("unpacking a sequence of the wrong length (ValueError)");
        for (auto r = it->items.rbegin(); r != it->items.rend(); ++r) f.stack.push_back(*r);
        break;
      }
      case Op::GET_ITER: {
        ValuePtr it = getIter(pop(f));
        if (!it) return nullptr;
        f.stack.push_back(std::move(it));
        break;
      }
      case Op::FOR_ITER: {
        ValuePtr& it = f.stack.back();
        if (!it->is(Kind::Iterator)) return fail("FOR_ITER on a non-iterator");
        if (it->pos < it->items.size()) {
          f.stack.push_back(it->items[it->pos++]);
        } else {
          f.stack.pop_back();
          if (!jumpTo(ins.jumpTarget())) return nullptr;
          next_pc = f.pc;
        }
        break;
      }
      case Op::POP_TOP:
        pop(f);
        break;
      case Op::COPY:
        f.stack.push_back(f.stack[f.stack.size() - static_cast<size_t>(arg)]);
        break;
      case Op::SWAP:
        std::swap(f.stack.back(), f.stack[f.stack.size() - static_cast<size_t>(arg)]);
        break;

      case Op::JUMP_FORWARD:
      case Op::JUMP_BACKWARD:
      case Op::JUMP_BACKWARD_NO_INTERRUPT:
        if (!jumpTo(ins.jumpTarget())) return nullptr;
        next_pc = f.pc;
        break;
      case Op::POP_JUMP_FORWARD_IF_FALSE:
      case Op::POP_JUMP_BACKWARD_IF_FALSE:
      case Op::POP_JUMP_FORWARD_IF_TRUE:
      case Op::POP_JUMP_BACKWARD_IF_TRUE: {
        ValuePtr v = pop(f);
        int t = truthValue(v);
        if (t < 0) return nullptr;
        bool jump_if = ins.op == Op::POP_JUMP_FORWARD_IF_TRUE || ins.op == Op::POP_JUMP_BACKWARD_IF_TRUE;
        if ((t != 0) == jump_if) {
          if (!jumpTo(ins.jumpTarget())) return nullptr;
          next_pc = f.pc;
        }
        break;
      }
      case Op::POP_JUMP_FORWARD_IF_NONE:
      case Op::POP_JUMP_BACKWARD_IF_NONE:
      case Op::POP_JUMP_FORWARD_IF_NOT_NONE:
      case Op::POP_JUMP_BACKWARD_IF_NOT_NONE: {
        ValuePtr v = pop(f);
        bool none = isNoneValue(v);
        bool jump_if_none = ins.op == Op::POP_JUMP_FORWARD_IF_NONE || ins.op == Op::POP_JUMP_BACKWARD_IF_NONE;
        if (none == jump_if_none) {
          if (!jumpTo(ins.jumpTarget())) return nullptr;
          next_pc = f.pc;
        }
        break;
      }
      case Op::JUMP_IF_FALSE_OR_POP:
      case Op::JUMP_IF_TRUE_OR_POP: {
        int t = truthValue(f.stack.back());
        if (t < 0) return nullptr;
        if ((t != 0) == (ins.op == Op::JUMP_IF_TRUE_OR_POP)) {
          if (!jumpTo(ins.jumpTarget())) return nullptr;
          next_pc = f.pc;
        } else {
          pop(f);
        }
        break;
      }
      case Op::RETURN_VALUE:
        return pop(f);

      default:
        return fail(std::string("opcode ") + bytecode::opName(static_cast<int>(ins.op)) +
                    " is not supported yet");
    }
    if (failed_) return nullptr;
    f.pc = next_pc;
  }
  return fail("fell off the end of the code object");
}

}  // namespace cdynamo::trace
