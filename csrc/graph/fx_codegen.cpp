// See fx_codegen.h. Each step below names the torch.fx code it reproduces (torch/fx/graph.py:
// CodeGen._gen_python_code, _Namespace.create_name, _format_target, CodeGen.gen_fn_def /
// generate_output); FX's own helpers that depend only on one object (_is_from_torch,
// _get_qualified_name) are called, once per target.
#include "graph/fx_codegen.h"
#include "graph/fx_namespace.h"

#include "support/lookup.h"

#include <cstdlib>
#include <cstring>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>

namespace cdynamo::graph::fxcodegen {
namespace {

// The lookup-table objects the generator uses (support/lookup.h); all found, and of the
// expected kinds, once fxObjectsFound() succeeded, so the generator calls lookup() without
// checking. False with an error set if torch.fx lacks any of them.
bool fxObjectsFound() {
  static const Obj kNeeded[] = {
      Obj::torch_fx_node_Node, Obj::torch_fx_graph_CodeGen, Obj::torch_fx_graph_PythonCode,
      Obj::torch_fx_graph_custom_builtins, Obj::torch_fx_graph_illegal_names, Obj::torch_fx_graph_magic_methods,
      Obj::torch_fx_graph_inplace_methods, Obj::torch_fx_graph_is_from_torch, Obj::torch_fx_node_get_qualified_name,
      Obj::torch_fx_experimental_config, Obj::torch_Tensor, Obj::torch_dtype, Obj::torch_device, Obj::torch_layout,
      Obj::torch_memory_format, Obj::torch_fx_graph_Graph};
  static bool found = false;
  if (found) return true;
  for (Obj o : kNeeded)
    if (!lookup(o)) return false;
  for (Obj o : {Obj::torch_fx_graph_custom_builtins, Obj::torch_fx_graph_illegal_names,
                Obj::torch_fx_graph_magic_methods, Obj::torch_fx_graph_inplace_methods})
    if (!PyDict_Check(lookup(o))) {
      PyErr_SetString(PyExc_TypeError, "torch.fx.graph internals of an unexpected kind");
      return false;
    }
  found = true;
  return true;
}

// Thrown (and caught in precompute) when the graph is left to FX: not an error.
struct Unsupported {};
// Thrown when a Python call failed: the error is set.
struct PyFailure {};

std::string utf8(PyObject* s) {
  Py_ssize_t n = 0;
  const char* p = PyUnicode_AsUTF8AndSize(s, &n);
  if (!p) throw PyFailure();
  return std::string(p, static_cast<size_t>(n));
}

Ref str(const std::string& s) {
  Ref r = Ref::steal(PyUnicode_FromStringAndSize(s.data(), static_cast<Py_ssize_t>(s.size())));
  if (!r) throw PyFailure();
  return r;
}

std::string reprOf(PyObject* o) {
  Ref r = Ref::steal(PyObject_Repr(o));
  if (!r) throw PyFailure();
  return utf8(r.get());
}

// torch.fx.graph._Namespace, as python_code uses a fresh one (fx_namespace.h), with its
// failures thrown as the generator's.
class Namespace {
 public:
  explicit Namespace(PyObject* illegal) : ns_(illegal) {}
  const std::string* nameOf(PyObject* obj) const { return ns_.nameOf(obj); }
  std::string create(std::string candidate, PyObject* obj) {
    std::string out;
    if (!ns_.create(std::move(candidate), obj, &out)) {
      if (PyErr_Occurred()) throw PyFailure();
      throw Unsupported();
    }
    return out;
  }

 private:
  FxNamespace ns_;
};

// torch.fx.graph._format_target
std::string formatTarget(const std::string& base, const std::string& target) {
  std::string r = base;
  size_t start = 0;
  for (;;) {
    size_t dot = target.find('.', start);
    std::string e = target.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    Ref es = str(e);
    int ident = PyUnicode_IsIdentifier(es.get());
    if (ident < 0) throw PyFailure();
    r = ident ? r + "." + e : "getattr(" + r + ", \"" + e + "\")";
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return r;
}

// "{}"-only format strings (magic_methods / inplace_methods) filled with `args`.
std::string fill(const std::string& fmt, const std::vector<std::string>& args) {
  std::string out;
  size_t next = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    char c = fmt[i];
    if (c == '{' || c == '}') {
      if (c == '{' && i + 1 < fmt.size() && fmt[i + 1] == '}' && next < args.size()) {
        out += args[next++];
        ++i;
        continue;
      }
      throw Unsupported();  // any other use of braces (or too few arguments): FX's own str.format
    }
    out += c;
  }
  return out;
}

class Generator {
 public:
  Generator(PyObject* graph, const std::vector<PyObject*>& nodes)
      : graph_(graph), nodes_(nodes), ns_(lookup(Obj::torch_fx_graph_illegal_names)) {}

  Ref run() {
    globals_ = Ref::steal(PyDict_New());
    if (!globals_) throw PyFailure();
    // Pre-fill the globals table with registered builtins.
    PyObject *name, *builtin;
    Py_ssize_t pos = 0;
    while (PyDict_Next(lookup(Obj::torch_fx_graph_custom_builtins), &pos, &name, &builtin)) {
      Ref obj = Ref::steal(PyObject_GetAttrString(builtin, "obj"));
      if (!obj) throw PyFailure();
      addGlobal(utf8(name), obj.get());
    }
    lastUses();
    for (size_t i = 0; i < nodes_.size(); ++i) {
      body_.push_back("# COUNTER: " + std::to_string(i) + "\n");
      emit(nodes_[i]);
      deleteUnusedValues(nodes_[i]);
    }
    if (body_.empty()) body_.push_back("pass\n");
    return finish();
  }

 private:
  struct NodeInfo {
    std::string op;
    Ref target, args, kwargs;
    size_t users = 0;
    std::vector<PyObject*> last_uses;  // user_to_last_uses[node]
  };

  NodeInfo& info(PyObject* n) {
    auto it = infos_.find(n);
    if (it != infos_.end()) return it->second;
    NodeInfo ni;
    Ref op = Ref::steal(PyObject_GetAttrString(n, "op"));
    ni.target = Ref::steal(PyObject_GetAttrString(n, "target"));
    ni.args = Ref::steal(PyObject_GetAttrString(n, "args"));
    ni.kwargs = Ref::steal(PyObject_GetAttrString(n, "kwargs"));
    Ref users = Ref::steal(PyObject_GetAttrString(n, "users"));
    Ref type = Ref::steal(PyObject_GetAttrString(n, "type"));
    Ref meta = Ref::steal(PyObject_GetAttrString(n, "meta"));
    if (!op || !ni.target || !ni.args || !ni.kwargs || !users || !type || !meta) throw PyFailure();
    if (type.get() != Py_None || !PyTuple_Check(ni.args.get()) || !PyDict_Check(ni.kwargs.get()) ||
        !PyDict_Check(users.get()) || !PyDict_Check(meta.get()))
      throw Unsupported();  // a type annotation, or an unexpected node
    PyObject* wrapped = PyDict_GetItemString(meta.get(), "is_wrapped");
    if (wrapped) throw Unsupported();
    ni.op = utf8(op.get());
    ni.users = static_cast<size_t>(PyDict_GET_SIZE(users.get()));
    return infos_.emplace(n, std::move(ni)).first->second;
  }

  // repr(node) under python_code: its name in the fresh namespace.
  std::string nodeRepr(PyObject* n) {
    if (const std::string* known = ns_.nameOf(n)) return *known;
    Ref name = Ref::steal(PyObject_GetAttrString(n, "name"));
    if (!name) throw PyFailure();
    return ns_.create(utf8(name.get()), n);
  }

  // _gen_python_code's add_global
  std::string addGlobal(const std::string& hint, PyObject* obj) {
    Ref from_torch = Ref::steal(PyObject_CallOneArg(lookup(Obj::torch_fx_graph_is_from_torch), obj));
    if (!from_torch) throw PyFailure();
    int t = PyObject_IsTrue(from_torch.get());
    if (t < 0) throw PyFailure();
    if (t && obj != lookup(Obj::torch_device)) return qualifiedName(obj);
    std::string name = ns_.create(hint, obj);
    Ref key = str(name);
    PyObject* existing = PyDict_GetItemWithError(globals_.get(), key.get());
    if (existing) {
      if (existing != obj) throw Unsupported();  // FX raises here
      return name;
    }
    if (PyErr_Occurred() || PyDict_SetItem(globals_.get(), key.get(), obj) < 0) throw PyFailure();
    return name;
  }

  std::string qualifiedName(PyObject* obj) {
    Ref q = Ref::steal(PyObject_CallOneArg(lookup(Obj::torch_fx_node_get_qualified_name), obj));
    if (!q) throw PyFailure();
    return utf8(q.get());
  }

  // _gen_python_code's _get_repr, for the kinds of arguments handled here.
  std::string argRepr(PyObject* a) {
    if (PyObject_TypeCheck(a, reinterpret_cast<PyTypeObject*>(lookup(Obj::torch_fx_node_Node)))) return nodeRepr(a);
    if (PyTuple_Check(a)) {
      if (PyObject_HasAttrString(a, "_fields")) throw Unsupported();  // a namedtuple
      Py_ssize_t n = PyTuple_GET_SIZE(a);
      if (n == 1) return "(" + argRepr(PyTuple_GET_ITEM(a, 0)) + ",)";
      std::string s = "(";
      for (Py_ssize_t i = 0; i < n; ++i) s += (i ? ", " : "") + argRepr(PyTuple_GET_ITEM(a, i));
      return s + ")";
    }
    if (PyList_Check(a)) {
      std::string s = "[";
      for (Py_ssize_t i = 0; i < PyList_GET_SIZE(a); ++i) s += (i ? ", " : "") + argRepr(PyList_GET_ITEM(a, i));
      return s + "]";
    }
    if (PySlice_Check(a)) {
      auto* sl = reinterpret_cast<PySliceObject*>(a);
      return "slice(" + argRepr(sl->start) + ", " + argRepr(sl->stop) + ", " + argRepr(sl->step) + ")";
    }
    PyObject* type = reinterpret_cast<PyObject*>(Py_TYPE(a));
    if (a == Py_None || PyBool_Check(a) || PyLong_CheckExact(a) || PyFloat_CheckExact(a) || PyUnicode_CheckExact(a) ||
        PyComplex_CheckExact(a) || type == lookup(Obj::torch_dtype) || type == lookup(Obj::torch_device) ||
        type == lookup(Obj::torch_layout) || type == lookup(Obj::torch_memory_format))
      return reprOf(a);
    throw Unsupported();  // enums, tensors, op overloads, opaque values, ...: FX's own rules
  }

  std::vector<std::string> reprs(PyObject* args, Py_ssize_t from = 0) {
    std::vector<std::string> out;
    for (Py_ssize_t i = from; i < PyTuple_GET_SIZE(args); ++i) out.push_back(argRepr(PyTuple_GET_ITEM(args, i)));
    return out;
  }

  // _format_args
  std::string formatArgs(PyObject* args, PyObject* kwargs, Py_ssize_t from = 0) {
    std::string s;
    bool first = true;
    for (const std::string& r : reprs(args, from)) {
      s += (first ? "" : ", ") + r;
      first = false;
    }
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    while (PyDict_Next(kwargs, &pos, &k, &v)) {
      if (!PyUnicode_Check(k)) throw Unsupported();
      s += (first ? "" : ", ") + utf8(k) + " = " + argRepr(v);
      first = false;
    }
    return s;
  }

  // Which values each node frees: the inputs whose last use it is (in the order FX finds them).
  void lastUses() {
    std::unordered_set<PyObject*> seen;
    for (size_t i = nodes_.size(); i-- > 0;) {
      PyObject* n = nodes_[i];
      NodeInfo& ni = info(n);
      Ref inputs = Ref::steal(PyObject_GetAttrString(n, "_input_nodes"));
      if (!inputs || !PyDict_Check(inputs.get())) throw PyFailure();
      PyObject *in, *unused;
      Py_ssize_t pos = 0;
      while (PyDict_Next(inputs.get(), &pos, &in, &unused))
        if (seen.insert(in).second) ni.last_uses.push_back(in);
    }
  }

  void emit(PyObject* n) {
    NodeInfo& ni = info(n);
    PyObject* target = ni.target.get();
    PyObject* args = ni.args.get();
    if (ni.op == "placeholder") {
      if (!PyUnicode_Check(target) || PyTuple_GET_SIZE(args) != 0) throw Unsupported();  // default values
      std::string t = utf8(target);
      free_vars_.push_back(t);
      std::string raw;
      for (char c : t)
        if (c != '*') raw += c;
      std::string r = nodeRepr(n);
      if (raw != r) body_.push_back(r + " = " + raw + "\n");
      return;
    }
    if (ni.op == "call_method") {
      if (!PyUnicode_Check(target) || PyTuple_GET_SIZE(args) < 1) throw Unsupported();
      std::string r = nodeRepr(n);
      std::string recv = formatTarget(argRepr(PyTuple_GET_ITEM(args, 0)), utf8(target));
      body_.push_back(r + " = " + recv + "(" + formatArgs(args, ni.kwargs.get(), 1) + ")");
      return;
    }
    if (ni.op == "call_function") {
      if (!PyCallable_Check(target) ||
          !(PyFunction_Check(target) || PyCFunction_Check(target) || PyType_Check(target) ||
            Py_IS_TYPE(target, &PyMethodDescr_Type) || Py_IS_TYPE(target, &PyWrapperDescr_Type)))
        throw Unsupported();  // objects named by equality rather than identity in FX's namespace
      Ref module = Ref::steal(PyObject_GetAttrString(target, "__module__"));
      if (!module) PyErr_Clear();
      Ref fname = Ref::steal(PyObject_GetAttrString(target, "__name__"));
      if (!fname) throw PyFailure();
      if (module && PyUnicode_Check(module.get()) && PyUnicode_CompareWithASCIIString(module.get(), "_operator") == 0) {
        PyObject* magic = PyDict_GetItemWithError(lookup(Obj::torch_fx_graph_magic_methods), fname.get());
        if (!magic && PyErr_Occurred()) throw PyFailure();
        if (magic) {
          std::string r = nodeRepr(n);
          body_.push_back(r + " = " + fill(utf8(magic), reprs(args)));
          return;
        }
        PyObject* inplace = PyDict_GetItemWithError(lookup(Obj::torch_fx_graph_inplace_methods), fname.get());
        if (!inplace && PyErr_Occurred()) throw PyFailure();
        if (inplace) {
          if (PyTuple_GET_SIZE(args) < 1) throw Unsupported();
          std::string stmt = fill(utf8(inplace), reprs(args));
          std::string r = nodeRepr(n);
          body_.push_back(stmt + ";  " + r + " = " + argRepr(PyTuple_GET_ITEM(args, 0)));
          return;
        }
      }
      std::string global = globalFor(target);
      if (global == "getattr" && PyTuple_GET_SIZE(args) == 2 && PyUnicode_Check(PyTuple_GET_ITEM(args, 1))) {
        int ident = PyUnicode_IsIdentifier(PyTuple_GET_ITEM(args, 1));
        if (ident < 0) throw PyFailure();
        if (ident) {
          std::string r = nodeRepr(n);
          body_.push_back(r + " = " + formatTarget(argRepr(PyTuple_GET_ITEM(args, 0)), utf8(PyTuple_GET_ITEM(args, 1))));
          return;
        }
      }
      std::string r = nodeRepr(n);
      body_.push_back(r + " = " + global + "(" + formatArgs(args, ni.kwargs.get()) + ")");
      return;
    }
    if (ni.op == "output") {
      if (PyTuple_GET_SIZE(args) != 1) throw Unsupported();
      body_.push_back("return " + argRepr(PyTuple_GET_ITEM(args, 0)));
      return;
    }
    throw Unsupported();  // call_module, get_attr
  }

  // add_global(_get_qualified_name(target), target), once per target.
  std::string globalFor(PyObject* target) {
    auto it = globals_of_.find(target);
    if (it != globals_of_.end()) return it->second;
    std::string g = addGlobal(qualifiedName(target), target);
    globals_of_.emplace(target, g);
    return g;
  }

  void deleteUnusedValues(PyObject* user) {
    NodeInfo& ni = info(user);
    if (ni.op == "placeholder") return;
    if (ni.op == "output") {
      body_.push_back("\n");
      return;
    }
    std::vector<PyObject*> to_delete = ni.last_uses;
    if (ni.users == 0) to_delete.push_back(user);
    if (to_delete.empty()) {
      body_.push_back("\n");
      return;
    }
    std::string s = ";  ";
    for (PyObject* d : to_delete) s += nodeRepr(d) + " = ";
    body_.push_back(s + "None\n");
  }

  // The end of _gen_python_code: prologue, line map, indentation, PythonCode.
  Ref finish() {
    // CodeGen.gen_fn_def
    if (free_vars_.empty() || free_vars_[0] != "self") free_vars_.insert(free_vars_.begin(), "self");
    std::string prologue = "def forward(";
    for (size_t i = 0; i < free_vars_.size(); ++i) prologue += (i ? ", " : "") + free_vars_[i];
    prologue += "):";
    const long prologue_len = 1;  // prologue.count("\n") + 1
    std::string joined;
    for (const std::string& b : body_) joined += b;
    Ref lineno_map = Ref::steal(PyDict_New());
    if (!lineno_map) throw PyFailure();
    std::vector<std::string> new_lines;
    Ref cur_idx = Ref::borrow(Py_None);
    size_t start = 0;
    for (;;) {
      size_t nl = joined.find('\n', start);
      std::string line = joined.substr(start, nl == std::string::npos ? std::string::npos : nl - start);
      long counter = -1;
      // _counter_regexp.search(line): "# COUNTER: (\d+)" anywhere in the line
      for (size_t at = line.find("# COUNTER: "); at != std::string::npos; at = line.find("# COUNTER: ", at + 1)) {
        size_t d = at + 11, e = d;
        while (e < line.size() && std::isdigit(static_cast<unsigned char>(line[e]))) ++e;
        if (e > d) {
          if (e - d > 15) throw Unsupported();
          counter = std::strtol(line.substr(d, e - d).c_str(), nullptr, 10);
          break;
        }
      }
      if (counter >= 0) {
        cur_idx = Ref::steal(PyLong_FromLong(counter));
        if (!cur_idx) throw PyFailure();
      } else {
        Ref key = Ref::steal(PyLong_FromSize_t(new_lines.size() + prologue_len));
        if (!key || PyDict_SetItem(lineno_map.get(), key.get(), cur_idx.get()) < 0) throw PyFailure();
        new_lines.push_back(std::move(line));
      }
      if (nl == std::string::npos) break;
      start = nl + 1;
    }
    std::string code;
    for (size_t i = 0; i < new_lines.size(); ++i) code += (i ? "\n" : "") + new_lines[i];
    code.erase(0, code.find_first_not_of('\n') == std::string::npos ? code.size() : code.find_first_not_of('\n'));
    std::string indented = "    ";
    for (char c : code) {
      indented += c;
      if (c == '\n') indented += "    ";
    }
    std::string wrap_stmts;  // no wrapped functions
    std::string fn_code = "\n" + wrap_stmts + "\n\n" + prologue + "\n" + indented;
    Ref src = str(fn_code);
    Ref prologue_start = Ref::steal(PyLong_FromLong(4));  // wrap_stmts.count("\n") + 4
    Ref kw = Ref::steal(PyDict_New());
    Ref pos = Ref::steal(PyTuple_Pack(2, src.get(), globals_.get()));
    if (!prologue_start || !kw || !pos || PyDict_SetItemString(kw.get(), "_lineno_map", lineno_map.get()) < 0 ||
        PyDict_SetItemString(kw.get(), "_prologue_start", prologue_start.get()) < 0)
      throw PyFailure();
    Ref pc = Ref::steal(PyObject_Call(lookup(Obj::torch_fx_graph_PythonCode), pos.get(), kw.get()));
    if (!pc) throw PyFailure();
    return pc;
  }

  PyObject* graph_;
  const std::vector<PyObject*>& nodes_;
  Namespace ns_;
  Ref globals_;
  std::vector<std::string> body_, free_vars_;
  std::unordered_map<PyObject*, NodeInfo> infos_;
  std::unordered_map<PyObject*, std::string> globals_of_;
};

// The settings under which FX's generation is the one reproduced here.
bool defaultCodegen(PyObject* graph) {
  Ref codegen = Ref::steal(PyObject_GetAttrString(graph, "_codegen"));
  if (!codegen) return false;
  if (reinterpret_cast<PyObject*>(Py_TYPE(codegen.get())) != lookup(Obj::torch_fx_graph_CodeGen)) return false;
  Ref transformer = Ref::steal(PyObject_GetAttrString(codegen.get(), "_body_transformer"));
  Ref func_name = Ref::steal(PyObject_GetAttrString(codegen.get(), "_func_name"));
  Ref record = Ref::steal(PyObject_GetAttrString(lookup(Obj::torch_fx_experimental_config), "enrich_profiler_metadata"));
  if (!transformer || !func_name || !record) return false;
  if (transformer.get() != Py_None || !PyUnicode_Check(func_name.get()) ||
      PyUnicode_CompareWithASCIIString(func_name.get(), "forward") != 0 || PyObject_IsTrue(record.get()) != 0)
    return false;
  // The instance attribute construct() sets must not shadow another one, and python_code
  // must be Graph's own.
  Ref dict = Ref::steal(PyObject_GenericGetDict(graph, nullptr));
  if (!dict || PyDict_GetItemString(dict.get(), "python_code")) return false;
  if (reinterpret_cast<PyObject*>(Py_TYPE(graph)) != lookup(Obj::torch_fx_graph_Graph)) return false;
  const char* meta = std::getenv("FX_GRAPH_SHOW_META");
  return !(meta && std::strcmp(meta, "1") == 0);
}

// CDYNAMO_CHECK_FX_CODEGEN: FX's own PythonCode must equal `ours`.
bool checkAgainstFx(PyObject* graph, PyObject* ours) {
  Ref kw = Ref::steal(Py_BuildValue("{s:s}", "root_module", "self"));
  Ref meth = Ref::steal(PyObject_GetAttrString(graph, "python_code"));
  Ref no_args = Ref::steal(PyTuple_New(0));
  if (!kw || !meth || !no_args) return false;
  Ref theirs = Ref::steal(PyObject_Call(meth.get(), no_args.get(), kw.get()));
  if (!theirs) return false;
  static const char* const kFields[] = {"src", "globals", "_lineno_map", "_prologue_start"};
  for (const char* f : kFields) {
    Ref a = Ref::steal(PyObject_GetAttrString(ours, f));
    Ref b = Ref::steal(PyObject_GetAttrString(theirs.get(), f));
    if (!a || !b) return false;
    int eq = PyObject_RichCompareBool(a.get(), b.get(), Py_EQ);
    if (eq < 0) return false;
    if (eq && std::strcmp(f, "globals") == 0) {  // the same objects, not just equal ones
      PyObject *k, *v;
      Py_ssize_t pos = 0;
      while (PyDict_Next(a.get(), &pos, &k, &v))
        if (PyDict_GetItem(b.get(), k) != v) eq = 0;
    }
    if (!eq) {
      Ref ra = Ref::steal(PyObject_Repr(a.get()));
      Ref rb = Ref::steal(PyObject_Repr(b.get()));
      PyErr_Format(PyExc_AssertionError, "cdynamo's FX code generation differs from torch.fx's in %s:\n%S\nvs\n%S", f,
                   ra.get(), rb.get());
      return false;
    }
  }
  return true;
}

// The stand-in for Graph.python_code during construct(): self is (code, graph). GraphModule
// .recompile asks python_code(root_module="self", record_func=False).
PyObject* answer(PyObject* self, PyObject* args, PyObject* kwargs) {
  PyObject* code = PyTuple_GET_ITEM(self, 0);
  PyObject* graph = PyTuple_GET_ITEM(self, 1);
  PyObject* root = nullptr;
  if (PyTuple_GET_SIZE(args) == 1) root = PyTuple_GET_ITEM(args, 0);
  bool plain = PyTuple_GET_SIZE(args) <= 1;
  if (plain && kwargs) {
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    while (plain && PyDict_Next(kwargs, &pos, &k, &v)) {
      if (PyUnicode_Check(k) && PyUnicode_CompareWithASCIIString(k, "root_module") == 0 && !root)
        root = v;
      else
        plain = v == Py_None || PyObject_IsTrue(v) == 0;
    }
    PyErr_Clear();
  }
  plain = plain && root && PyUnicode_Check(root) && PyUnicode_CompareWithASCIIString(root, "self") == 0;
  if (plain) return Py_NewRef(code);
  // Asked for something else (verbose, another root): FX's own generation.
  Ref method = Ref::steal(PyObject_GetAttrString(reinterpret_cast<PyObject*>(Py_TYPE(graph)), "python_code"));
  if (!method) return nullptr;
  Ref full = Ref::steal(PyTuple_New(PyTuple_GET_SIZE(args) + 1));
  if (!full) return nullptr;
  PyTuple_SET_ITEM(full.get(), 0, Py_NewRef(graph));
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(args); ++i)
    PyTuple_SET_ITEM(full.get(), i + 1, Py_NewRef(PyTuple_GET_ITEM(args, i)));
  return PyObject_Call(method.get(), full.get(), kwargs);
}

PyMethodDef kAnswer = {"python_code", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(answer)),
                       METH_VARARGS | METH_KEYWORDS, nullptr};

}  // namespace

Ref precompute(PyObject* graph, const std::vector<PyObject*>& nodes) {
  if (!fxObjectsFound()) return Ref();
  if (!defaultCodegen(graph)) {
    PyErr_Clear();
    return Ref();
  }
  Ref code;
  try {
    code = Generator(graph, nodes).run();
  } catch (const Unsupported&) {
    PyErr_Clear();
    return Ref();
  } catch (const PyFailure&) {
    return Ref();
  }
  const char* check = std::getenv("CDYNAMO_CHECK_FX_CODEGEN");
  if (check && std::strcmp(check, "1") == 0 && !checkAgainstFx(graph, code.get())) return Ref();
  return code;
}

Ref construct(PyObject* graph_module_cls, PyObject* root, PyObject* graph, PyObject* code) {
  Ref self = Ref::steal(PyTuple_Pack(2, code, graph));
  Ref fn = self ? Ref::steal(PyCFunction_NewEx(&kAnswer, self.get(), nullptr)) : Ref();
  if (!fn || PyObject_SetAttrString(graph, "python_code", fn.get()) < 0) return Ref();
  Ref gm = Ref::steal(PyObject_CallFunctionObjArgs(graph_module_cls, root, graph, nullptr));
  // Remove the stand-in on every path, keeping a construction error as the one set.
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  if (PyObject_DelAttrString(graph, "python_code") < 0) {
    if (type) {
      PyErr_Clear();
    } else {
      return Ref();
    }
  }
  PyErr_Restore(type, value, tb);
  return gm;
}

}  // namespace cdynamo::graph::fxcodegen
