// Handlers of the opcodes that build and update containers: BUILD_MAP, BUILD_CONST_KEY_MAP,
// BUILD_SET, LIST_APPEND/SET_ADD, LIST_EXTEND/SET_UPDATE/DICT_UPDATE/DICT_MERGE, MAP_ADD,
// DELETE_SUBSCR, UNPACK_EX (handlers.h).
#include <algorithm>
#include <cstring>
#include <string>
#include <unordered_map>

#include "support/check.h"
#include "support/lookup.h"
#include "support/torch_types.h"
#include "trace/engine/scalars.h"
#include "trace/kinds/iterator.h"
#include "trace/opcodes/handlers.h"
#include "trace/protocol/container_methods.h"
#include "trace/protocol/operators.h"
#include "trace/tracer.h"

namespace cdynamo::trace {

using bytecode::BinaryOp;
using bytecode::Op;

Result<Next> opBuildMap(Tracer& t, SymbolicFrame&, const bytecode::Instruction& ins, Values& io) {
  ValuePtr d = Value::emptyDict();
  for (size_t i = 0; i < static_cast<size_t>(ins.arg); ++i)
    if (Done done = storeSubscript(t, d, io[2 * i], io[2 * i + 1]); !done) return done.stop();
  io.assign(1, std::move(d));
  return Next::Fall;
}

Result<Next> opBuildConstKeyMap(Tracer& t, SymbolicFrame&, const bytecode::Instruction& ins, Values& io) {
  // Stack: the values, then the tuple of keys.
  PyObject* keys = io.back()->constant();
  ValuePtr d = Value::emptyDict();
  for (int i = 0; i < ins.arg; ++i)
    if (Done done = storeSubscript(t, d, Value::constant(PyTuple_GET_ITEM(keys, i)), io[static_cast<size_t>(i)]);
        !done)
      return done.stop();
  io.assign(1, std::move(d));
  return Next::Fall;
}

Result<Next> opBuildSet(Tracer& t, SymbolicFrame&, const bytecode::Instruction&, Values& io) {
  ValuePtr s = Value::set({});
  for (const ValuePtr& v : io)
    if (Done d = containerCall(t, s, Str::add, v); !d) return d.stop();
  io.assign(1, std::move(s));
  return Next::Fall;
}

Result<Next> opAppend(Tracer& t, SymbolicFrame&, const bytecode::Instruction& ins, Values& io) {
  // LIST_APPEND i / SET_ADD i: the container is i below the value.
  ValuePtr v = std::move(io.back());
  io.pop_back();
  if (Done d = containerCall(t, io.front(), ins.op == Op::LIST_APPEND ? Str::append : Str::add, v); !d)
    return d.stop();
  return Next::Fall;
}

Result<Next> opUpdate(Tracer& t, SymbolicFrame&, const bytecode::Instruction& ins, Values& io) {
  // SET_UPDATE i / DICT_UPDATE i / DICT_MERGE i: the container is i below the value.
  ValuePtr v = std::move(io.back());
  io.pop_back();
  const ValuePtr& target = io.front();
  const Dict* from = v->get<Dict>();
  const Dict* into = target->get<Dict>();
  if (ins.op == Op::DICT_MERGE && from && into) {
    for (const Ref& k : from->keys) {
      int found = into->findKey(k.get());
      if (found == -2) return t.failFromPython("dict merge");
      if (found >= 0) return t.fail("got multiple values for a keyword argument (TypeError)");
    }
  }
  if (Done d = containerCall(t, target, Str::update, v); !d) return d.stop();
  return Next::Fall;
}

Result<Next> opMapAdd(Tracer& t, SymbolicFrame&, const bytecode::Instruction&, Values& io) {
  // MAP_ADD i: the dict is i below the key and value.
  ValuePtr value = std::move(io.back());
  io.pop_back();
  ValuePtr key = std::move(io.back());
  io.pop_back();
  if (Done d = storeSubscript(t, io.front(), key, value); !d) return d.stop();
  return Next::Fall;
}

Result<Next> opDeleteSubscr(Tracer& t, SymbolicFrame&, const bytecode::Instruction&, Values& io) {
  if (Done done = deleteItem(t, io[0], io[1]); !done) return done.stop();
  io.clear();
  return Next::Fall;
}

Result<Next> opUnpackEx(Tracer& t, SymbolicFrame&, const bytecode::Instruction& ins, Values& io) {
  std::vector<ValuePtr> items;
  if (Done d = iterate(t, io[0], &items); !d) return d.stop();
  const size_t before = static_cast<size_t>(ins.arg & 0xFF), after = static_cast<size_t>(ins.arg >> 8);
  if (items.size() < before + after) return t.fail("not enough values to unpack (ValueError)");
  std::vector<ValuePtr> middle(items.begin() + static_cast<std::ptrdiff_t>(before),
                               items.end() - static_cast<std::ptrdiff_t>(after));
  io.clear();
  for (size_t i = 0; i < after; ++i) io.push_back(items[items.size() - 1 - i]);
  io.push_back(Value::list(std::move(middle)));
  for (size_t i = before; i > 0; --i) io.push_back(items[i - 1]);
  return Next::Fall;
}

}  // namespace cdynamo::trace
