// The guard program on its own: loads through registers, each check kind, owned
// registers released, and readable failure explanations. (Tensor checks need torch and
// are covered by the pytest suite.)
#include <Python.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <random>

#include "check.h"
#include "guards/guard_program.h"

// Every C++ heap allocation of this executable is counted, so a test can show that a guard
// run (the hit path) allocates nothing. (CPython's own allocations use its allocator.)
namespace {
std::atomic<long> g_news{0};
}  // namespace
// GCC cannot see that these replace the global pair and warns about free() on new'd memory.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void* operator new(std::size_t n) {
  ++g_news;
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

using namespace cdynamo;
using namespace cdynamo::guards;

namespace {

struct Obj {
  PyObject* o;
  explicit Obj(PyObject* p) : o(p) {}
  ~Obj() { Py_XDECREF(o); }
};

void testLocalsConstantsAndContainers() {
  Obj n(PyLong_FromLong(7)), s(PyUnicode_FromString("relu")), lst(Py_BuildValue("[iii]", 1, 2, 3));
  Obj hooks(PyDict_New());
  PyObject* fast[4] = {n.o, s.o, lst.o, hooks.o};
  FrameView view;
  view.fast = fast;
  view.nfast = 4;

  GuardProgram p;
  int r0 = p.load(LoadKind::Local, -1, 0, nullptr, "L['n']");
  int r1 = p.load(LoadKind::Local, -1, 1, nullptr, "L['act']");
  int r2 = p.load(LoadKind::Local, -1, 2, nullptr, "L['xs']");
  int r3 = p.load(LoadKind::Local, -1, 3, nullptr, "L['hooks']");
  EXPECT_EQ(p.load(LoadKind::Local, -1, 0, nullptr, "L['n']"), r0);  // shared register
  p.checkEquals(r0, n.o);
  p.checkEquals(r1, s.o);
  p.checkType(r2, &PyList_Type);
  p.checkLength(r2, 3);
  int item = p.load(LoadKind::ListItem, r2, 1, nullptr, "L['xs'][1]");
  Obj two(PyLong_FromLong(2));
  p.checkEquals(item, two.o);
  p.checkDictEmpty(r3);
  EXPECT_EQ(p.numRegisters(), 5);

  std::vector<PyObject*> regs(p.numRegisters());
  EXPECT(p.run(view, regs.data()));
  EXPECT(regs[item] == PyList_GET_ITEM(lst.o, 1));
  EXPECT(p.explainFailure(view).empty());

  // Each change fails the program, with a sentence naming the source.
  Obj eight(PyLong_FromLong(8));
  fast[0] = eight.o;
  EXPECT(!p.run(view, regs.data()));
  EXPECT(p.explainFailure(view) == "L['n'] == 7, got 8");
  Obj seven_float(PyFloat_FromDouble(7.0));
  fast[0] = seven_float.o;  // 7.0 == 7 but is another type: must not match
  EXPECT(!p.run(view, regs.data()));
  fast[0] = n.o;
  PyList_Append(lst.o, n.o);
  EXPECT(!p.run(view, regs.data()));
  EXPECT(p.explainFailure(view).find("len(L['xs']) == 3") != std::string::npos);
  PySequence_DelItem(lst.o, 3);
  EXPECT(p.run(view, regs.data()));
  PyDict_SetItemString(hooks.o, "h", Py_None);
  EXPECT(!p.run(view, regs.data()));
  PyDict_Clear(hooks.o);
  EXPECT(p.run(view, regs.data()));
  EXPECT(p.describe().find("L['act'] == 'relu'") != std::string::npos);
}

void testGlobalsAttributesAndIdentity() {
  PyObject* main = PyImport_AddModule("__main__");
  PyObject* globals = PyModule_GetDict(main);
  PyRun_String("class C:\n  pass\nobj = C()\nobj.k = 3\nobj.name = 'a'\n", Py_file_input, globals, globals);
  EXPECT(!PyErr_Occurred());
  FrameView view;
  view.globals = globals;
  view.builtins = PyEval_GetBuiltins();

  GuardProgram p;
  PyObject* obj_name = PyUnicode_FromString("obj");
  PyObject* k_name = PyUnicode_FromString("k");
  PyObject* name_name = PyUnicode_FromString("name");
  PyObject* len_name = PyUnicode_FromString("len");
  int robj = p.load(LoadKind::Global, -1, 0, obj_name, "G['obj']");
  PyObject* obj = PyDict_GetItemString(globals, "obj");
  p.checkIdentity(robj, obj);
  int rk = p.load(LoadKind::InstanceDict, robj, 0, k_name, "G['obj'].k");
  Obj three(PyLong_FromLong(3));
  p.checkEquals(rk, three.o);
  int rname = p.load(LoadKind::Attr, robj, 0, name_name, "G['obj'].name");  // owned register
  Obj a(PyUnicode_FromString("a"));
  p.checkEquals(rname, a.o);
  int rlen = p.load(LoadKind::Global, -1, 0, len_name, "G['len']");  // falls through to builtins
  p.checkIdentity(rlen, PyDict_GetItemString(PyEval_GetBuiltins(), "len"));

  std::vector<PyObject*> regs(p.numRegisters());
  EXPECT(p.run(view, regs.data()));
  Py_ssize_t refs_before = Py_REFCNT(PyDict_GetItemString(PyObject_GenericGetDict(obj, nullptr), "name"));
  for (int i = 0; i < 100; ++i) {
    EXPECT(p.run(view, regs.data()));
    p.release(regs.data());
  }
  EXPECT_EQ(Py_REFCNT(PyDict_GetItemString(PyObject_GenericGetDict(obj, nullptr), "name")), refs_before);

  PyRun_String("obj.k = 4\n", Py_file_input, globals, globals);
  EXPECT(!p.run(view, regs.data()));
  PyRun_String("obj.k = 3\nobj = C()\nobj.k = 3\nobj.name = 'a'\n", Py_file_input, globals, globals);
  EXPECT(!p.run(view, regs.data()));  // another object: identity fails (the old one is dead)
  PyRun_String("del obj\n", Py_file_input, globals, globals);
  EXPECT(!p.run(view, regs.data()));  // missing global: a failed load fails the guard
  EXPECT(p.explainFailure(view) == "G['obj'] could not be read");
  EXPECT(!PyErr_Occurred());
  Py_DECREF(obj_name);
  Py_DECREF(k_name);
  Py_DECREF(name_name);
  Py_DECREF(len_name);
}

// Dict lookups are remembered by the dict's version tag (DictMemo): every change to a
// dict, and every other dict, must be looked up afresh.
void testDictLookupsRememberedByVersion() {
  PyObject* main = PyImport_AddModule("__main__");
  PyObject* globals = PyModule_GetDict(main);
  PyRun_String("class M:\n  pass\n"
               "def make(w):\n  m = M()\n  m._parameters = {'weight': w}\n  m._forward_hooks = {}\n  return m\n"
               "m = make(1)\n",
               Py_file_input, globals, globals);
  EXPECT(!PyErr_Occurred());
  FrameView view;
  view.globals = globals;
  view.builtins = PyEval_GetBuiltins();

  GuardProgram p;
  Obj m_name(PyUnicode_FromString("m")), params_name(PyUnicode_FromString("_parameters")),
      weight_name(PyUnicode_FromString("weight")), one(PyLong_FromLong(1));
  int rm = p.load(LoadKind::Global, -1, 0, m_name.o, "G['m']");
  p.checkNoModuleHooks(rm);
  int rp = p.load(LoadKind::InstanceDict, rm, 0, params_name.o, "G['m']._parameters");
  int rw = p.load(LoadKind::DictItem, rp, 0, weight_name.o, "G['m']._parameters['weight']");
  p.checkEquals(rw, one.o);
  std::vector<PyObject*> regs(p.numRegisters());
  for (int i = 0; i < 3; ++i) EXPECT(p.run(view, regs.data()));  // remembered from the 2nd run on

  auto run = [&](const char* src) {
    PyRun_String(src, Py_file_input, globals, globals);
    EXPECT(!PyErr_Occurred());
    bool first = p.run(view, regs.data());
    bool again = p.run(view, regs.data());  // from the memo when nothing changed
    EXPECT_EQ(first, again);
    return first;
  };
  EXPECT(!run("m._parameters['weight'] = 2\n"));      // an item changed in place
  EXPECT(run("m._parameters['weight'] = 1\n"));       // and back
  EXPECT(!run("m._parameters = {'weight': 2}\n"));    // the instance dict changed
  EXPECT(run("m._parameters = {'weight': 1}\n"));
  EXPECT(!run("del m._parameters['weight']\n"));      // a failed lookup is not remembered
  EXPECT(run("m._parameters['weight'] = 1\n"));
  EXPECT(run("m = make(1)\n"));                       // other dicts, same contents
  EXPECT(!run("m = make(3)\n"));
  EXPECT(run("m = make(1)\n"));
  // Hooks: the hook dicts are remembered through the module's __dict__ version, their
  // sizes are read every time.
  EXPECT(!run("m._forward_hooks['h'] = print\n"));    // the module's __dict__ is unchanged
  EXPECT(run("m._forward_hooks.clear()\n"));
  EXPECT(!run("m._forward_hooks = {'h': print}\n"));
  EXPECT(run("m._forward_hooks = {}\n"));
  EXPECT(!run("m._forward_hooks = [1]\n"));           // not a dict
  EXPECT(run("m._forward_hooks = {}\n"));
  for (int i = 0; i < 100; ++i) {  // fresh dicts, some possibly at a freed dict's address
    PyRun_String("m = make(1 if len(M.__dict__) else 0)\n", Py_file_input, globals, globals);
    EXPECT(p.run(view, regs.data()));
    PyRun_String("m = make(2)\n", Py_file_input, globals, globals);
    EXPECT(!p.run(view, regs.data()));
  }
  EXPECT(!PyErr_Occurred());
}

// Guards on values a trace did not use can be dropped (the items an input iterator had
// left past those it took): their loads, loads through them, and checks of them go.
void testDroppedRegistersAndLengthAtLeast() {
  Obj t(Py_BuildValue("(iii)", 1, 2, 3)), one(PyLong_FromLong(1)), two(PyLong_FromLong(2)), three(PyLong_FromLong(3));
  PyObject* fast[1] = {t.o};
  FrameView view;
  view.fast = fast;
  view.nfast = 1;

  GuardProgram p;
  int rt = p.load(LoadKind::Local, -1, 0, nullptr, "L['t']");
  int r0 = p.load(LoadKind::TupleItem, rt, 0, nullptr, "L['t'][0]");
  int r1 = p.load(LoadKind::TupleItem, rt, 1, nullptr, "L['t'][1]");
  int r2 = p.load(LoadKind::TupleItem, rt, 2, nullptr, "L['t'][2]");
  p.checkEquals(r0, one.o);
  p.checkEquals(r1, two.o);
  p.checkEquals(r2, three.o);
  p.checkAliasing(r1, r2, false);
  std::vector<PyObject*> regs(p.numRegisters());
  EXPECT(p.run(view, regs.data()));
  EXPECT_EQ(p.numChecks(), static_cast<size_t>(4));

  p.dropRegisters({r2});
  p.checkLengthAtLeast(rt, 2);
  EXPECT_EQ(p.numChecks(), static_cast<size_t>(3));  // L['t'][2] == 3 and the aliasing check are gone
  EXPECT(p.describe().find("L['t'][2]") == std::string::npos);
  EXPECT(p.describe().find("len(L['t']) >= 2") != std::string::npos);
  EXPECT(p.load(LoadKind::TupleItem, rt, 2, nullptr, "L['t'][2]") != r2);  // a dropped load is not shared
  Obj longer(Py_BuildValue("(iiii)", 1, 2, 99, 4)), exact(Py_BuildValue("(ii)", 1, 2)), shorter(Py_BuildValue("(i)", 1)),
      other(Py_BuildValue("(ii)", 1, 5));
  std::vector<PyObject*> regs2(p.numRegisters());
  fast[0] = longer.o;
  EXPECT(p.run(view, regs2.data()));   // item 2 (99) is no longer checked
  fast[0] = exact.o;
  EXPECT(!p.run(view, regs2.data()));  // but the load added after the drop (item 2) is a live one
  GuardProgram q;
  int qt = q.load(LoadKind::Local, -1, 0, nullptr, "L['t']");
  int q0 = q.load(LoadKind::TupleItem, qt, 0, nullptr, "L['t'][0]");
  int q1 = q.load(LoadKind::TupleItem, qt, 1, nullptr, "L['t'][1]");
  q.checkEquals(q0, one.o);
  q.checkEquals(q1, two.o);
  q.dropRegisters({q1});
  q.checkLengthAtLeast(qt, 1);
  std::vector<PyObject*> qregs(q.numRegisters());
  for (PyObject* ok : {t.o, longer.o, exact.o, shorter.o, other.o}) {
    fast[0] = ok;
    EXPECT(q.run(view, qregs.data()));
  }
  Obj empty(PyTuple_New(0)), wrong(Py_BuildValue("(ii)", 7, 2));
  fast[0] = empty.o;
  EXPECT(!q.run(view, qregs.data()));
  EXPECT(q.explainFailure(view).find("len(L['t']) >= 1") != std::string::npos ||
         q.explainFailure(view).find("could not be read") != std::string::npos);
  fast[0] = wrong.o;
  EXPECT(!q.run(view, qregs.data()));
  EXPECT(!PyErr_Occurred());
}

// The reference rule, pair by pair: every pair with a mutated member shares a storage
// exactly when its registers were in one group at trace time.
bool pairwiseRule(const std::vector<const void*>& st, const std::vector<int>& groups, const std::vector<uint8_t>& mutated) {
  for (size_t i = 0; i < st.size(); ++i)
    for (size_t j = 0; j < st.size(); ++j) {
      if (i == j || !(mutated[i] || mutated[j])) continue;
      if ((st[i] != nullptr && st[i] == st[j]) != (groups[i] == groups[j])) return false;
    }
  return true;
}

void testStorageAliasingDecisions() {
  static char pool[64];
  // Small and pairwise: a and b were one storage at trace time, c another; b is mutated.
  {
    StorageGuard g({0, 1, 2}, {0, 0, 1}, {0, 1, 0});
    const void* same[] = {&pool[0], &pool[0], &pool[1]};
    const void* split[] = {&pool[0], &pool[2], &pool[1]};
    const void* joined[] = {&pool[0], &pool[0], &pool[0]};
    EXPECT(g.relates(same));
    EXPECT(!g.relates(split));
    EXPECT(!g.relates(joined));
    EXPECT(!g.all_distinct);
  }
  // Large (> 32 registers, many mutated): the sort path. Sharing between two registers the
  // graph only reads is allowed there as pairwise, sharing with a mutated one is not, and
  // tensors without a storage (null) share nothing.
  const size_t n = 100;
  std::vector<int> regs(n), groups(n);
  std::vector<uint8_t> mutated(n, 0);
  for (size_t i = 0; i < n; ++i) regs[i] = groups[i] = static_cast<int>(i);
  for (size_t i = 0; i < 20; ++i) mutated[i * 5] = 1;  // 20 x 100 pairs: past the pairwise bound
  StorageGuard g(regs, groups, mutated);
  EXPECT(g.all_distinct);
  EXPECT_EQ(g.num_mutated, static_cast<size_t>(20));
  static char more[1000];
  std::vector<const void*> distinct(n);
  for (size_t i = 0; i < n; ++i) distinct[i] = &more[i];
  EXPECT(g.relates(distinct.data()));
  std::vector<const void*> v = distinct;
  v[51] = v[52];  // two read-only registers now share a storage
  EXPECT(g.relates(v.data()));
  v = distinct;
  v[60] = v[5];  // a mutated one (5) shares with another
  EXPECT(!g.relates(v.data()));
  v = distinct;
  v[3] = v[4] = v[5] = nullptr;  // no storage: shares nothing, mutated or not
  EXPECT(g.relates(v.data()));
  size_t bi = 0, bj = 0;
  v = distinct;
  v[99] = v[10];
  EXPECT(g.firstMismatch(v.data(), &bi, &bj) && (bi == 10 || bj == 10));

  // The sort path and the pairwise rule agree on random storages and groups.
  std::mt19937 rng(1234);
  int disagreements = 0;
  for (int round = 0; round < 3000; ++round) {
    const size_t m = 33 + rng() % 90;
    std::vector<int> rr(m), gg(m);
    std::vector<uint8_t> mm(m);
    const bool distinct_groups = round % 3 != 0;
    for (size_t i = 0; i < m; ++i) {
      rr[i] = static_cast<int>(i);
      gg[i] = distinct_groups ? static_cast<int>(i) : static_cast<int>(rng() % m);
      mm[i] = rng() % 3 == 0;
    }
    StorageGuard rg(rr, gg, mm);
    std::vector<const void*> ss(m);
    const size_t kinds = m + (rng() % 4 == 0 ? 0 : 3 * m);  // often no collision at all
    for (size_t i = 0; i < m; ++i) {
      size_t k = rng() % kinds;
      ss[i] = k == 0 ? nullptr : &more[k];
    }
    if (rg.relates(ss.data()) != pairwiseRule(ss, gg, mm)) ++disagreements;
  }
  EXPECT_EQ(disagreements, 0);
}

void testStoragesCheckAllocatesNothingOnAHit() {
  // The decision of a hit, past the 32 registers the check once kept on its stack: pairwise
  // (40 registers, 10 mutated) and sorted (100, all mutated), passing and failing.
  static char bag[100];
  for (size_t n : {static_cast<size_t>(40), static_cast<size_t>(100)}) {
    std::vector<int> regs(n), groups(n);
    std::vector<uint8_t> mutated(n, n == 100 ? 1 : 0);
    for (size_t i = 0; i < n; ++i) regs[i] = groups[i] = static_cast<int>(i);
    for (size_t i = 0; i < 10; ++i) mutated[i * 4] = 1;
    StorageGuard g(regs, groups, mutated);
    std::vector<const void*> st(n), shared(n);
    for (size_t i = 0; i < n; ++i) st[i] = shared[i] = &bag[i];
    shared[n - 1] = shared[0];  // register 0 is mutated
    const long before = g_news.load();
    bool all_ok = true;
    for (int k = 0; k < 100; ++k) all_ok = all_ok && g.relates(st.data()) && !g.relates(shared.data());
    EXPECT_EQ(g_news.load() - before, 0L);
    EXPECT(all_ok);
  }
}

void testStoragesCheckInAProgram() {
  // A program's Storages check: its side record (not the Check) holds the registers; its
  // description names the mutated inputs, and dropping one of its registers drops it.
  const int n = 40;
  GuardProgram q;
  std::vector<int> regs, groups;
  std::vector<uint8_t> mutated;
  for (int i = 0; i < n; ++i) {
    regs.push_back(q.load(LoadKind::Local, -1, i, nullptr, "L['t" + std::to_string(i) + "']"));
    groups.push_back(i == 7 ? 3 : i);  // t3 and t7 shared a storage at trace time
    mutated.push_back(i % 2);
  }
  q.checkStorages(regs, groups, mutated);
  q.checkLength(regs[0], 0);
  EXPECT_EQ(q.numChecks(), static_cast<size_t>(2));
  EXPECT(q.describe().find("mutated by the graph: L['t1'], L['t3']") != std::string::npos);
  q.dropRegisters({regs[7]});
  EXPECT_EQ(q.numChecks(), static_cast<size_t>(1));  // the Storages check went with t7
  EXPECT(q.describe().find("storages") == std::string::npos);
  EXPECT(!PyErr_Occurred());
}

}  // namespace


// load() shares a register between equal loads, found by their (kind, base, index) key:
// loads that differ only in their name (attribute names, dict keys equal by value) or in their
// index stay apart, and a dropped load is not reused.
void testLoadsSharedByKey() {
  GuardProgram p;
  int rdict = p.load(LoadKind::Local, -1, 0, nullptr, "L['d']");
  Obj one(PyLong_FromLong(1)), one_again(PyLong_FromLong(1)), two(PyLong_FromLong(2));
  int k1 = p.load(LoadKind::DictItem, rdict, 0, one.o, "L['d'][1]");
  EXPECT_EQ(p.load(LoadKind::DictItem, rdict, 0, one_again.o, "L['d'][1]"), k1);  // equal keys
  int k2 = p.load(LoadKind::DictItem, rdict, 0, two.o, "L['d'][2]");
  EXPECT(k2 != k1);
  int rlist = p.load(LoadKind::Local, -1, 1, nullptr, "L['xs']");
  std::vector<int> items;
  for (int i = 0; i < 1000; ++i) items.push_back(p.load(LoadKind::ListItem, rlist, i, nullptr, "L['xs'][i]"));
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(p.load(LoadKind::ListItem, rlist, i, nullptr, "L['xs'][i]"), items[i]);
  EXPECT(items[0] != items[1] && items[1] != items[999]);
  EXPECT(p.load(LoadKind::ListItem, rdict, 0, nullptr, "L['d'][0]") != items[0]);  // another base
}

int main() {
  Py_Initialize();
  testLocalsConstantsAndContainers();
  testGlobalsAttributesAndIdentity();
  testDictLookupsRememberedByVersion();
  testDroppedRegistersAndLengthAtLeast();
  testStorageAliasingDecisions();
  testStoragesCheckAllocatesNothingOnAHit();
  testStoragesCheckInAProgram();
  testLoadsSharedByKey();
  Py_Finalize();
  return TEST_MAIN_RESULT();
}
