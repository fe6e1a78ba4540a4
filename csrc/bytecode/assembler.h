// The symbolic bytecode assembler (bytecode is generated as instructions and labels, never
// as hand-computed offsets) and its inverse.
//
// Code is written as a list of instructions whose jumps name labels, not offsets, plus
// exception-table ranges between labels. assemble() lays the code out: inline CACHE units,
// EXTENDED_ARG prefixes to a fixed point, relative jump arguments, the exception table,
// the location table and co_stacksize. buildCode() turns the result into a real code
// object through `code.replace(...)` on a template. disassemble() produces the symbolic
// form of an existing code object, so that assemble(disassemble(co)) reproduces co.
// See docs/bytecode.md.
#pragma once
#include <Python.h>

#include <string>
#include <vector>

#include "bytecode/opcodes.h"
#include "bytecode/tables.h"
#include "support/pyref.h"

namespace cdynamo::bytecode {

// One instruction of the symbolic form. For a jump ('J' flag) `label` names the target and
// `arg` is ignored; for every other opcode `arg` is the full argument (EXTENDED_ARG is
// never written by hand: the assembler adds the prefixes).
struct AsmInstr {
  Op op = Op::NOP;
  int arg = 0;
  int label = -1;
  Position pos;
};

// An exception-table range in symbolic form: instructions from the one `start` is bound
// to up to (not including) the one `end` is bound to jump to `handler` on an exception.
struct AsmHandler {
  int start = -1;
  int end = -1;
  int handler = -1;
  int depth = 0;
  bool lasti = false;
};

// A function body in symbolic form. Labels are small integers handed out by newLabel()
// and bound to the position of the next instruction emitted (bind() may come after the
// jumps that use the label). Plain data: copying is cheap enough for tests and codegen.
struct Assembly {
  std::vector<AsmInstr> instrs;
  std::vector<int> labelAt;  // label id -> instruction index it is bound to (-1: unbound)
  std::vector<AsmHandler> handlers;

  int newLabel();
  // Binds `label` to the next instruction (instrs.size()); a label bound at the end of
  // the list may end an exception range but is not a valid jump target. An unknown label
  // id is a broken invariant (CDYNAMO_CHECK aborts).
  void bind(int label);
  void emit(Op op, int arg = 0, Position pos = {});
  // Either direction's variant may be given (JUMP_FORWARD / JUMP_BACKWARD; on 3.11
  // POP_JUMP_FORWARD_IF_x / POP_JUMP_BACKWARD_IF_x); assemble() picks the right one
  // (bytecode/version.h jumpForDirection), or fails where the version has none.
  void emitJump(Op op, int label, Position pos = {});
  void addHandler(int start, int end, int handler, int depth, bool lasti);
};

// The parts of a code object that assemble() computes.
struct AssembledCode {
  std::string code;            // co_code: opcodes, EXTENDED_ARG prefixes, zeroed caches
  std::string exceptionTable;  // co_exceptiontable
  std::string lineTable;       // co_linetable
  int stackSize = 0;           // co_stacksize
  std::vector<int> unitOf;     // instruction index -> code unit of its first byte (its
                               // first EXTENDED_ARG prefix, if any); size = instrs + 1
};

// Lays out `a`. Line numbers in the location table count from `firstLineNo`. Returns
// false with a message in `error` when the input is inconsistent: an unbound or unknown
// label, a jump whose direction has no opcode variant, a negative argument, overlapping
// exception ranges, a position the location table cannot hold, or code whose stack depth
// cannot be computed (unknown opcode, negative depth, a join with two different depths).
bool assemble(const Assembly& a, int firstLineNo, AssembledCode* out, std::string* error);

// Maximum value-stack depth of `a` (co_stacksize), by propagating depths from the first
// instruction along fall-through, jump and exception edges with
// PyCompile_OpcodeStackEffectWithJump (see stack_depth.cpp). Needs the interpreter
// initialized. Same error contract as assemble().
bool computeStackSize(const Assembly& a, int* stackSize, std::string* error);

// The symbolic form of `co` (its instructions de-quickened, jump targets and exception
// ranges turned into labels, each instruction given the position of its first code unit).
// Returns false with `error` set if the code's tables cannot be decoded or a jump lands
// inside an instruction.
bool disassemble(PyCodeObject* co, Assembly* out, std::string* error);

// A new code object: `templ.replace(co_code=..., co_exceptiontable=..., co_linetable=...,
// co_stacksize=..., co_firstlineno=firstLineNo, **extra)`; `extra` (a dict, may be null)
// supplies co_consts, co_names, co_varnames, co_name, ... as needed. Returns a null Ref
// with a Python exception set on failure (e.g. CPython rejecting the fields).
Ref buildCode(PyObject* templ, const AssembledCode& parts, int firstLineNo, PyObject* extra);

}  // namespace cdynamo::bytecode
