"""Test helpers (the counterparts of torch._dynamo.testing)."""


class CompileCounter:
    """A backend that counts what it is given and runs the graph as is.

    ``frame_count``: how many graphs the backend was called with.
    ``op_count``: how many of their nodes call something (op contains "call").
    """

    def __init__(self):
        self.frame_count = 0
        self.op_count = 0
        self.graphs = []

    def __call__(self, gm, example_inputs):
        self.frame_count += 1
        self.graphs.append(gm)
        for node in gm.graph.nodes:
            if "call" in node.op:
                self.op_count += 1
        return gm.forward

    def clear(self):
        self.frame_count = 0
        self.op_count = 0
        self.graphs = []
