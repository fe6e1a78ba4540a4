// Whether this thread is propagating fake tensors through a trace: between a GraphBuilder's
// begin() and finish(), not inside its backend call. cdynamo._C.in_fake_propagation() asks,
// so that torch's fake-tensor logger stays quiet about an op failing there: the tracer
// handles that exception (the program's own error, raised as eagerly, or a graph break).
#pragma once

namespace cdynamo::graph {

bool inFakePropagation();

// Not propagating for a scope (the backend call: the backend's own errors are its to report).
class FakePropagationPaused {
 public:
  FakePropagationPaused();
  ~FakePropagationPaused();
  FakePropagationPaused(const FakePropagationPaused&) = delete;
  FakePropagationPaused& operator=(const FakePropagationPaused&) = delete;

 private:
  int saved_;
};

}  // namespace cdynamo::graph
