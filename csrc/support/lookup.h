// The one cache of Python names and objects that cdynamo's C++ stages use by name
// (support/lookup.def lists them): interned strings, and the torch / operator / builtins /
// cdynamo objects the tracer and graph builder compare with or call. Each is made or looked
// up once, on first use (the hook never imports torch before a trace needs it), and kept
// for the process (Note [Python references in statics]); an access is an array index.
//
// Errors: interned(...) returns null only when making the string fails (MemoryError,
// first use); lookup(...) returns null with the import's or getattr's error set when the
// object cannot be found, and tries again on the next call.
#pragma once
#include <Python.h>

#include <cstdint>

namespace cdynamo {

enum class Str : uint16_t {
#define STR(id, text) id,
#define OBJ(id, module, path)
#include "support/lookup.def"
#undef OBJ
#undef STR
  kCount
};

enum class Obj : uint16_t {
#define STR(id, text)
#define OBJ(id, module, path) id,
#include "support/lookup.def"
#undef OBJ
#undef STR
  kCount
};

// The interned string (borrowed, immortal for the process).
PyObject* interned(Str s);
// The object (borrowed, kept for the process), or null with an error set.
PyObject* lookup(Obj o);

}  // namespace cdynamo
