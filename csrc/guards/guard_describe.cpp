// The cold half of a guard program: its description, one line per check, the sites the
// checks came from, and the explanation of the first failing step on a miss. Each check
// kind says itself (guards/kinds/*.h); the dispatch over kinds is generated from
// guards/guard_kinds.def.
#include "guards/guard_program.h"

#include <sstream>

#include "guards/kinds/container_checks.h"
#include "guards/kinds/object_checks.h"
#include "guards/kinds/state_checks.h"
#include "guards/kinds/tensor_checks.h"

namespace cdynamo::guards {
namespace kinds {

std::string typeName(PyObject* type) {
  return PyType_Check(type) ? reinterpret_cast<PyTypeObject*>(type)->tp_name : std::string("<a class that no longer exists>");
}

std::string reprOf(PyObject* o) {
  Ref r = Ref::steal(PyObject_Repr(o));
  if (!r) {
    PyErr_Clear();
    return "<unprintable>";
  }
  std::string s = PyUnicode_AsUTF8(r.get());
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return s;
}

std::string failedCheck(const std::string& description) { return "guard failed: " + description; }

}  // namespace kinds

namespace {
// The code object of an origin frame (borrowed), or null once it is gone.
PyCodeObject* codeOf(const OriginFrame& f) {
  PyObject* code = PyWeakref_Check(f.code.get()) ? PyWeakref_GetObject(f.code.get()) : f.code.get();
  if (!code || !PyCode_Check(code)) {
    PyErr_Clear();
    return nullptr;
  }
  return reinterpret_cast<PyCodeObject*>(code);
}
}  // namespace

std::string describeOrigin(const Origin& o) {
  std::string out;
  for (const OriginFrame& f : o) {
    PyCodeObject* co = codeOf(f);
    if (!co) continue;  // the code is gone
    const char* file = PyUnicode_AsUTF8(co->co_filename);
    const char* name = PyUnicode_AsUTF8(co->co_qualname);
    if (!file || !name) {
      PyErr_Clear();
      continue;
    }
    int line = PyCode_Addr2Line(co, f.offset * static_cast<int>(sizeof(_Py_CODEUNIT)));
    if (!out.empty()) out += " <- ";
    out += std::string(file) + ":" + std::to_string(line) + " in " + name;
  }
  return out;
}

std::string GuardProgram::describeCheck(const Check& c) const {
  switch (c.kind) {  // one case per CHECK row of guards/guard_kinds.def
#define CHECK(name, last) \
  case CheckKind::name:   \
    return checks::name::describe(c, *this);
#include "guards/guard_kinds.def"
  }
  return "?";
}

std::string GuardProgram::explainCheck(const Check& c, PyObject** regs) const {
  PyObject* v = c.reg >= 0 ? regs[c.reg] : nullptr;
  switch (c.kind) {  // one case per CHECK row of guards/guard_kinds.def
#define CHECK(name, last) \
  case CheckKind::name:   \
    return checks::name::explain(c, v, regs, *this);
#include "guards/guard_kinds.def"
  }
  return "?";
}

std::string GuardProgram::describe() const {
  std::ostringstream s;
  for (const Check& c : checks_)
    if (!c.dropped) s << describeCheck(c) << "\n";
  return s.str();
}

PyObject* GuardProgram::describeSites() const {
  Ref out = Ref::steal(PyList_New(0));
  if (!out) return nullptr;
  for (const Check& c : checks_) {
    if (c.dropped) continue;
    Ref frames = Ref::steal(PyList_New(0));
    if (!frames) return nullptr;
    for (const OriginFrame& f : c.origin) {
      PyCodeObject* co = codeOf(f);
      if (!co) continue;
      int line = PyCode_Addr2Line(co, f.offset * static_cast<int>(sizeof(_Py_CODEUNIT)));
      Ref frame = Ref::steal(Py_BuildValue("(OiO)", co->co_filename, line, co->co_qualname));
      if (!frame || PyList_Append(frames.get(), frame.get()) < 0) return nullptr;
    }
    std::string text = describeCheck(c);
    Ref py_text = Ref::steal(PyUnicode_FromStringAndSize(text.data(), static_cast<Py_ssize_t>(text.size())));
    Ref site = py_text ? Ref::steal(PyTuple_Pack(2, py_text.get(), frames.get())) : Ref();
    if (!site || PyList_Append(out.get(), site.get()) < 0) return nullptr;
  }
  return out.release();
}

std::string GuardProgram::explainFailure(const FrameView& f) const {
  std::vector<PyObject*> regs(loads_.size() + 1, nullptr);
  std::string reason;
  for (const Step& s : steps_) {
    if (s.is_load) {
      const Load& ld = loads_[s.index];
      if (!runLoad(ld, f, regs.data())) {
        reason = names_[s.index] + " could not be read";
        break;
      }
      continue;
    }
    const Check& c = checks_[s.index];
    if (runCheck(c, regs.data())) continue;
    reason = explainCheck(c, regs.data());
    // Where the guard came from: built here, from what the trace recorded.
    std::string from = describeOrigin(c.origin);
    if (!from.empty()) reason += " (guard from " + from + ")";
    break;
  }
  release(regs.data());
  return reason;
}

}  // namespace cdynamo::guards
