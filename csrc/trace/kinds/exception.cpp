// Exceptions raised and caught inside the trace. An exception of the traced program is a
// real exception object (made without running Python code) carried as a value; raising
// it sets it in flight and the frames' exception tables deliver it (runFrame). One that
// escapes the traced frame stops the trace: the frame then runs natively and raises it
// for real, so the user sees exactly CPython's behaviour.
#include <string>

#include "support/py_error.h"
#include "trace/kinds/exception.h"
#include "trace/protocol/calls.h"
#include "trace/protocol/constants.h"
#include "trace/tracer.h"
#include "support/type_dict.h"

namespace cdynamo::trace {

Stop Tracer::raiseValue(ValuePtr exc) {
  pending_exc_ = std::move(exc);
  return Stop{Outcome::Raised};
}

ValuePtr Tracer::takePendingException() {
  ValuePtr e = std::move(pending_exc_);
  pending_exc_.reset();
  return e;
}

bool Tracer::chainToHandled(PyObject* exc) {
  // CPython's implicit chaining (_PyErr_SetObject): an exception raised while another is
  // being handled gets it as __context__; a chain that already leads back to the raised
  // exception is cut there so that no cycle is made (a cycle that exists is left alone).
  if (!current_exc_) {
    // Raised where the traced program handles nothing: the context is then whatever the
    // caller of the compiled frame is handling, a different object on each call. Captured
    // only when that is nothing, and guarded to stay so (sys.exception() is None).
    Ref outer = Ref::steal(PyErr_GetHandledException());
    if (outer && outer.get() != Py_None) return false;
    PyObject* query = PySys_GetObject("exception");  // borrowed
    Ref no_args = Ref::steal(PyTuple_New(0));
    if (query && no_args) guards().checkStateQuery(query, no_args.get(), nullptr, Py_None);
    PyErr_Clear();
    return true;
  }
  PyObject* handled = current_exc_->real();
  if (!handled || handled == Py_None || handled == exc || !PyExceptionInstance_Check(handled)) return true;
  PyObject* o = handled;
  PyObject* slow = o;
  bool advance_slow = false;
  while (PyObject* ctx = exceptionContext(o)) {
    if (ctx == exc) {
      PyException_SetContext(o, nullptr);
      break;
    }
    o = ctx;
    if (o == slow) break;
    if (advance_slow) {
      slow = exceptionContext(slow);
    }
    advance_slow = !advance_slow;
  }
  PyException_SetContext(exc, Ref::borrow(handled).release());
  return true;
}

Done Tracer::noteTraceback(SymbolicFrame& f) {
  PyObject* exc = pending_exc_ ? pending_exc_->real() : nullptr;
  if (!exc || !PyExceptionInstance_Check(exc) || f.pc >= f.instrs.size()) return {};
  const bytecode::Instruction& ins = f.instrs[f.pc];
  // A re-raise (RERAISE, a bare `raise`) goes on with the traceback it has in this frame.
  if (ins.op == bytecode::Op::RERAISE || (ins.op == bytecode::Op::RAISE_VARARGS && ins.arg == 0)) return {};
  // A real traceback object, so that tb_next, tb_lineno, tb_lasti, the setters' checks and
  // with_traceback() behave as CPython's. Its tb_frame cannot be the traced frame (which
  // has no frame object while it is traced): it is the caller's, and reading it is refused.
  if (!traceback_frame_) {
    PyFrameObject* caller = PyEval_GetFrame();
    if (!caller) return fail("an exception's traceback where no Python frame calls the compiled one");
    traceback_frame_ = Ref::borrow(reinterpret_cast<PyObject*>(caller));
  }
  const int lasti = ins.offset * 2;
  const int line = PyCode_Addr2Line(const_cast<PyCodeObject*>(f.code), lasti);
  Ref old = Ref::steal(PyException_GetTraceback(exc));
  Ref tb = Ref::steal(PyObject_CallFunction(reinterpret_cast<PyObject*>(&PyTraceBack_Type), "OOii",
                                            old ? old.get() : Py_None, traceback_frame_.get(), lasti, line));
  if (!tb || PyException_SetTraceback(exc, tb.get()) < 0) return failFromPython("making a traceback entry");
  if (!raiseSite(exc)) {
    RaiseSite site{Ref::borrow(exc), {}, {}};
    SymbolicFrame* saved = current_;
    current_ = &f;
    setLocation(&site.where);
    current_ = saved;
    std::vector<const SymbolicFrame*> chain;
    for (const SymbolicFrame* p = &f; p; p = p->parent) chain.insert(chain.begin(), p);
    for (const SymbolicFrame* p : chain) {
      int off = p->pc < p->instrs.size() ? p->instrs[p->pc].offset * 2 : 0;
      site.traceback += std::string("  File \"") + PyUnicode_AsUTF8(p->code->co_filename) + "\", line " +
                        std::to_string(PyCode_Addr2Line(const_cast<PyCodeObject*>(p->code), off)) + ", in " +
                        PyUnicode_AsUTF8(p->code->co_name) + "\n";
    }
    raise_sites_.push_back(std::move(site));
  }
  return {};
}

const Tracer::RaiseSite* Tracer::raiseSite(PyObject* exc) const {
  for (const RaiseSite& site : raise_sites_)
    if (site.exc.get() == exc) return &site;
  return nullptr;
}

Stop Tracer::failOuterHandled() {
  return fail("an exception raised while the compiled frame's caller handles another (its __context__ "
              "would be a different object on each call)");
}

Stop Tracer::raisePython() {
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  if (!type) return fail("internal: raisePython without an error");
  PyErr_NormalizeException(&type, &value, &tb);
  Ref type_ref = Ref::steal(type), exc = Ref::steal(value), tb_ref = Ref::steal(tb);
  if (!exc) return fail("internal: an exception that could not be normalized");
  PyException_SetTraceback(exc.get(), Py_None);
  // Raised by C code run during the trace, where the thread's exc_info is not the traced
  // program's: chain it as CPython would have unless the code chained it already.
  if (!exceptionContext(exc.get()) && !chainToHandled(exc.get())) return failOuterHandled();
  return raiseValue(Value::of(Object{exc.copy(), true}));  // made during the trace: its own
}

Stop Tracer::raiseNew(PyObject* type, const std::string& message) {
  Ref exc = Ref::steal(PyObject_CallFunction(type, "s", message.c_str()));
  if (!exc) return failFromPython("making an exception");
  if (!chainToHandled(exc.get())) return failOuterHandled();
  return raiseValue(Value::of(Object{exc.copy(), true}));
}

Result<ValuePtr> makeException(Tracer& t, PyObject* cls, std::vector<ValuePtr>& args, Kwargs kwargs) {
  // The instance is made by C code (BaseException.__new__); a Python __init__ is then
  // traced on it like any method. A Python __new__ would run outside the trace: refused.
  PyObject* init = nullptr;
  PyObject* mro = reinterpret_cast<PyTypeObject*>(cls)->tp_mro;
  for (Py_ssize_t i = 0; mro && i < PyTuple_GET_SIZE(mro); ++i) {
    PyObject* dict = typeDict(reinterpret_cast<PyTypeObject*>(PyTuple_GET_ITEM(mro, i)));
    PyObject* n = dict ? PyDict_GetItemString(dict, "__new__") : nullptr;
    if (n && PyFunction_Check(n)) return t.fail("an exception class with a Python __new__ is not supported yet");
    PyObject* f = dict ? PyDict_GetItemString(dict, "__init__") : nullptr;
    if (f && !init) init = f;
  }
  Ref pargs = Ref::steal(PyTuple_New(static_cast<Py_ssize_t>(args.size())));
  if (!pargs) return t.failFromPython("making an exception");
  for (size_t i = 0; i < args.size(); ++i) {
    Ref p = toPython(t, args[i]);
    if (!p) return t.fail("exception arguments must be constants");
    PyTuple_SET_ITEM(pargs.get(), i, p.release());
  }
  bool python_init = init && PyFunction_Check(init);
  // Keywords go to a Python __init__ only (BaseException.__new__ keeps the positional
  // arguments as .args, as CPython does); C initialisers refuse them.
  if (!kwargs.empty() && !python_init) return t.fail("keyword arguments to an exception class without a Python __init__");
  Ref exc = Ref::steal(python_init ? reinterpret_cast<PyTypeObject*>(cls)->tp_new(reinterpret_cast<PyTypeObject*>(cls),
                                                                                  pargs.get(), nullptr)
                                   : PyObject_Call(cls, pargs.get(), nullptr));
  if (!exc) return t.failFromPython("making an exception");
  ValuePtr v = Value::of(Object{exc.copy(), true});
  if (python_init) {
    std::vector<ValuePtr> init_args{v};
    init_args.insert(init_args.end(), args.begin(), args.end());
    Result<ValuePtr> r = t.inlineFunction(init, -1, std::move(init_args), std::move(kwargs));
    if (!r) return r;
    if (!(*r)->isNone())
      return t.fail("__init__() should return None (TypeError)");
  }
  return v;
}

}  // namespace cdynamo::trace
