// Between real code objects and the symbolic form: disassemble() and buildCode().
//
// Both stay on the public side of the code object: the fields read here
// (co_exceptiontable, co_linetable, co_firstlineno) are in cpython/code.h, and a new
// code object is made by `code.replace(...)`, whose keyword names are stable where the
// positional order of PyCode_New* is not (it changed in 3.8 and 3.11).
#include <map>
#include <string>

#include "bytecode/assembler.h"
#include "bytecode/instructions.h"

namespace cdynamo::bytecode {
namespace {

bool fail(std::string* error, std::string msg) {
  if (error) *error = std::move(msg);
  return false;
}

const uint8_t* bytesOf(PyObject* b) {
  return reinterpret_cast<const uint8_t*>(PyBytes_AS_STRING(b));
}

}  // namespace

bool disassemble(PyCodeObject* co, Assembly* out, std::string* error) {
  *out = Assembly();
  const int nunits = static_cast<int>(Py_SIZE(co));
  std::vector<Instruction> instrs = decode(co);

  std::vector<ExceptionTableEntry> table;
  if (!PyBytes_Check(co->co_exceptiontable) ||
      !decodeExceptionTable(bytesOf(co->co_exceptiontable),
                            PyBytes_GET_SIZE(co->co_exceptiontable), &table)) {
    return fail(error, "malformed co_exceptiontable");
  }
  std::vector<LocationEntry> locations;
  if (!PyBytes_Check(co->co_linetable) ||
      !decodeLocationTable(bytesOf(co->co_linetable), PyBytes_GET_SIZE(co->co_linetable),
                           co->co_firstlineno, &locations)) {
    return fail(error, "malformed co_linetable");
  }
  std::vector<Position> positions = positionsPerUnit(locations, nunits);

  // One label per distinct code unit that something refers to; a unit must be the start
  // of an instruction (its first EXTENDED_ARG), or the end of the code for range ends.
  std::map<int, int> labelOfUnit;
  bool ok = true;
  auto labelFor = [&](int unit) {
    auto it = labelOfUnit.find(unit);
    if (it != labelOfUnit.end()) return it->second;
    int index = unit == nunits ? static_cast<int>(instrs.size()) : indexAtOffset(instrs, unit);
    if (index < 0) {
      ok = false;
      return -1;
    }
    int label = out->newLabel();
    out->labelAt[label] = index;
    labelOfUnit.emplace(unit, label);
    return label;
  };

  out->instrs.reserve(instrs.size());
  for (const Instruction& ins : instrs) {
    AsmInstr a;
    a.op = ins.op;
    a.pos = positions[ins.start];
    if (opHasFlag(static_cast<int>(ins.op), 'J')) {
      a.label = labelFor(ins.jumpTarget());
      if (!ok) return fail(error, "jump into the middle of an instruction at unit " +
                                      std::to_string(ins.offset));
    } else {
      a.arg = ins.arg;
    }
    out->instrs.push_back(a);
  }
  for (const ExceptionTableEntry& e : table) {
    int s = labelFor(e.start), end = labelFor(e.end), target = labelFor(e.target);
    if (!ok) return fail(error, "exception range not on instruction boundaries");
    out->addHandler(s, end, target, e.depth, e.lasti);
  }
  return true;
}

Ref buildCode(PyObject* templ, const AssembledCode& parts, int firstLineNo, PyObject* extra) {
  Ref replace = Ref::steal(PyObject_GetAttrString(templ, "replace"));
  if (!replace) return Ref();
  Ref kwargs = Ref::steal(extra ? PyDict_Copy(extra) : PyDict_New());
  if (!kwargs) return Ref();
  // The assembled fields are set last so they win over anything in `extra`.
  struct Field {
    const char* name;
    Ref value;
  };
  Field fields[] = {
      {"co_code", Ref::steal(PyBytes_FromStringAndSize(parts.code.data(),
                                                       static_cast<Py_ssize_t>(parts.code.size())))},
      {"co_exceptiontable",
       Ref::steal(PyBytes_FromStringAndSize(parts.exceptionTable.data(),
                                            static_cast<Py_ssize_t>(parts.exceptionTable.size())))},
      {"co_linetable",
       Ref::steal(PyBytes_FromStringAndSize(parts.lineTable.data(),
                                            static_cast<Py_ssize_t>(parts.lineTable.size())))},
      {"co_stacksize", Ref::steal(PyLong_FromLong(parts.stackSize))},
      {"co_firstlineno", Ref::steal(PyLong_FromLong(firstLineNo))},
  };
  for (Field& f : fields) {
    if (!f.value || PyDict_SetItemString(kwargs.get(), f.name, f.value.get()) < 0) return Ref();
  }
  Ref noArgs = Ref::steal(PyTuple_New(0));
  if (!noArgs) return Ref();
  return Ref::steal(PyObject_Call(replace.get(), noArgs.get(), kwargs.get()));
}

}  // namespace cdynamo::bytecode
