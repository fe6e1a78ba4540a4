#include "support/lookup.h"

#include <cstring>

#include "support/pyref.h"

namespace cdynamo {
namespace {

const char* const kTexts[] = {
#define STR(id, text) text,
#define OBJ(id, module, path)
#include "support/lookup.def"
#undef OBJ
#undef STR
};

struct Path {
  const char* module;
  const char* attrs;
};

const Path kPaths[] = {
#define STR(id, text)
#define OBJ(id, module, path) {module, path},
#include "support/lookup.def"
#undef OBJ
#undef STR
};

// Raw slots: each holds one reference kept for the process (Note [Python references in
// statics]: never released, so no destructor runs after Py_Finalize).
PyObject* strings[static_cast<size_t>(Str::kCount)] = {};
PyObject* objects[static_cast<size_t>(Obj::kCount)] = {};

// import `module`, then getattr along the dotted `attrs`.
PyObject* resolve(const Path& p) {
  Ref o = Ref::steal(PyImport_ImportModule(p.module));
  const char* a = p.attrs;
  while (o && *a) {
    const char* dot = std::strchr(a, '.');
    size_t n = dot ? static_cast<size_t>(dot - a) : std::strlen(a);
    Ref name = Ref::steal(PyUnicode_FromStringAndSize(a, static_cast<Py_ssize_t>(n)));
    o = name ? Ref::steal(PyObject_GetAttr(o.get(), name.get())) : Ref();
    a += n + (dot ? 1 : 0);
  }
  return o.release();
}

}  // namespace

PyObject* interned(Str s) {
  PyObject*& slot = strings[static_cast<size_t>(s)];
  if (!slot) slot = PyUnicode_InternFromString(kTexts[static_cast<size_t>(s)]);
  return slot;
}

PyObject* lookup(Obj o) {
  PyObject*& slot = objects[static_cast<size_t>(o)];
  if (!slot) slot = resolve(kPaths[static_cast<size_t>(o)]);
  return slot;
}

}  // namespace cdynamo
