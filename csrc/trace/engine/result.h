// The tracer's one failure protocol (docs/design.md, "Three error channels"): every operation that can do
// something other than produce its value says which of four outcomes happened.
//
//  * Ok           the value (a Result<ValuePtr> that is ok holds a non-null value).
//  * Unsupported  the trace cannot go on. Tracer::fail recorded the reason and the source
//                 location when it made this outcome; callers only pass it up.
//  * Raised       the traced program raised: the exception is in flight in the tracer
//                 (Tracer::pendingException), to be delivered by the frames' exception
//                 tables (Tracer::runFrame), as CPython's "null + error set".
//  * NotHandled   "not mine": the callee declined and did nothing (no state changed, no
//                 guard added); the caller tries its next rule. Only functions documented
//                 as declining return it, and it never crosses an instruction.
//
// A non-Ok outcome is a Stop; every Result converts from one, so `return fail("...")`,
// `return raiseNew(...)`, `return notHandled()` and `return r.stop()` read the same in any
// function. There is no Result from nullptr: a null pointer never means failure.
#pragma once
#include <memory>
#include <utility>

#include "support/check.h"

namespace cdynamo::trace {

enum class Outcome : unsigned char { Ok, Unsupported, Raised, NotHandled };

namespace detail {
template <class T>
struct IsSharedPtr : std::false_type {};
template <class T>
struct IsSharedPtr<std::shared_ptr<T>> : std::true_type {};
}  // namespace detail

struct [[nodiscard]] Stop {
  Outcome outcome;
};

inline Stop notHandled() { return Stop{Outcome::NotHandled}; }

template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {  // NOLINT: the Ok outcome
    if constexpr (detail::IsSharedPtr<T>::value) CDYNAMO_CHECK(value_ != nullptr, "an Ok result without its value");
  }
  Result(Stop s) : outcome_(s.outcome) { CDYNAMO_CHECK(s.outcome != Outcome::Ok, "a Stop must not be Ok"); }
  Result(std::nullptr_t) = delete;  // a null value is not an outcome: say which

  bool ok() const { return outcome_ == Outcome::Ok; }
  explicit operator bool() const { return ok(); }
  Outcome outcome() const { return outcome_; }
  bool notHandled() const { return outcome_ == Outcome::NotHandled; }
  // The outcome, to pass a failure up from a function of another result type.
  Stop stop() const {
    CDYNAMO_CHECK(!ok(), "stop() of an Ok result");
    return Stop{outcome_};
  }

  const T& operator*() const { return checked(); }
  T& operator*() { return const_cast<T&>(checked()); }
  const T* operator->() const { return &checked(); }
  T* operator->() { return const_cast<T*>(&checked()); }
  T take() { return std::move(const_cast<T&>(checked())); }

 private:
  const T& checked() const {
    CDYNAMO_CHECK(ok(), "value of a failed result");
    return value_;
  }
  T value_{};
  Outcome outcome_ = Outcome::Ok;
};

// An operation with no value: Done{} on success.
template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Stop s) : outcome_(s.outcome) { CDYNAMO_CHECK(s.outcome != Outcome::Ok, "a Stop must not be Ok"); }

  bool ok() const { return outcome_ == Outcome::Ok; }
  explicit operator bool() const { return ok(); }
  Outcome outcome() const { return outcome_; }
  bool notHandled() const { return outcome_ == Outcome::NotHandled; }
  Stop stop() const {
    CDYNAMO_CHECK(!ok(), "stop() of an Ok result");
    return Stop{outcome_};
  }

 private:
  Outcome outcome_ = Outcome::Ok;
};

using Done = Result<void>;

// The outcome of `r` without its value.
template <class T>
Done outcomeOf(const Result<T>& r) {
  if (!r) return r.stop();
  return {};
}

}  // namespace cdynamo::trace
