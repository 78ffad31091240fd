"""The torch CUDA-graph idiom the GPU tests share: one eager call on a side stream first (first-call work -- kernel
attributes, lazy allocations -- must not land in the capture), then the capture of the same call."""


def capture(call):
    """(graph, what the captured call returned). Capturing runs nothing: until the first replay, the buffers hold
    the warm-up call's results."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        call()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        result = call()
    return graph, result
