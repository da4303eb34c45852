"""CPU call buffers: fresh memfds per call, outputs poisoned, inputs checked against the copy."""

import mmap
import os

import torch

from cuda_gym.judge.handover import Handover


def test_inputs_are_written_outputs_poisoned_and_mutation_seen():
    hand = Handover("cpu", share=None)
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    fields, fds = hand.prepare([x, 3], [torch.zeros(3, 4)])
    assert len(fds) == 2 and fields["inputs"][1]["value"] == 3
    # What the runner does: map the inputs, write its output into the outputs' buffer.
    ins = torch.frombuffer(mmap.mmap(os.dup(fds[0]), fields["input_bytes"]), dtype=torch.uint8)
    outs = torch.frombuffer(mmap.mmap(os.dup(fds[1]), fields["output_bytes"]), dtype=torch.uint8)
    seen = ins[:48].view(torch.float32).view(3, 4)
    assert torch.equal(seen, x)
    assert torch.isnan(outs[:48].view(torch.float32)).all()  # poisoned
    outs[:48].view(torch.float32).copy_(seen.reshape(-1) * 2)
    outputs, mutated = hand.collect([None])
    assert torch.equal(outputs[0], x * 2) and not mutated


def test_a_modified_input_is_reported():
    hand = Handover("cpu", share=None)
    x = torch.ones(8)
    fields, fds = hand.prepare([x], [torch.zeros(8)])
    ins = torch.frombuffer(mmap.mmap(os.dup(fds[0]), fields["input_bytes"]), dtype=torch.uint8)
    ins[:4].view(torch.float32).fill_(5.0)
    _, mutated = hand.collect([None])
    assert mutated and torch.equal(x, torch.ones(8))  # the driver's copy stays pristine
