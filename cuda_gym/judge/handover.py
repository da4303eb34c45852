"""Hand one call's inputs to the untrusted runner and take its outputs back (trusted side).

The driver owns every buffer. Before each call it writes that call's fresh inputs and poisons
the output slots; the runner's forward reads the inputs in place (so a write to them shows) and
the runner copies its outputs into the slots; after the call the driver copies the outputs out
and compares the inputs with its pristine copy.

- CPU: two fresh memfds per call (inputs, outputs), passed with the call's message: the runner
  has no view of a call's inputs before the call starts.
- CUDA: buffers allocated once per layout with CUDA's virtual memory API and lent to the
  runner once as file descriptors (cuda_gym.judge.device_share: legacy CUDA IPC does not cross
  the sandbox's PID namespace), rewritten by the driver before every call (the driver's L2
  flush then runs between the write and the call).
"""

from __future__ import annotations

import mmap
import os

import torch

from cuda_gym.judge.device_share import SharedDeviceBuffer
from cuda_gym.judge.output_checks import bitwise_equal

ALIGN = 64


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _layout(values: list) -> tuple[list[dict], int]:
    """TensorSpec dicts for `values` packed one after another, and the bytes they need."""
    specs, offset = [], 0
    for v in values:
        if isinstance(v, torch.Tensor):
            specs.append(
                {
                    "offset": offset,
                    "shape": list(v.shape),
                    "dtype": _dtype_name(v.dtype),
                    "value": None,
                }
            )
            offset += (v.numel() * v.element_size() + ALIGN - 1) // ALIGN * ALIGN
        else:
            if not (v is None or type(v) in (bool, int, float, str)):
                raise TypeError(f"cannot hand a {type(v).__name__} to the runner")
            specs.append({"offset": 0, "shape": [], "dtype": "", "value": v})
    return specs, offset


def _host_buffer(size: int) -> tuple[int, torch.Tensor | None]:
    fd = os.memfd_create("cuda_gym_call", os.MFD_CLOEXEC)
    if size == 0:
        return fd, None
    os.ftruncate(fd, size)
    return fd, torch.frombuffer(mmap.mmap(fd, size), dtype=torch.uint8)


def _view(buf: torch.Tensor | None, spec: dict) -> torch.Tensor:
    dtype = getattr(torch, spec["dtype"])
    numel = 1
    for d in spec["shape"]:
        numel *= d
    if numel == 0 or buf is None:
        return torch.empty(
            spec["shape"], dtype=dtype, device=buf.device if buf is not None else "cpu"
        )
    nbytes = numel * dtype.itemsize
    return buf[spec["offset"] : spec["offset"] + nbytes].view(dtype).view(spec["shape"])


def _poison(t: torch.Tensor) -> None:
    if t.numel():
        t.reshape(-1).view(torch.uint8).fill_(255)  # NaN in every float dtype


class Handover:
    """One runner's call buffers on `device`; `prepare` before a call, `collect` after it.

    Args:
        device: "cuda" or "cpu".
        share: On CUDA, lends newly allocated buffers to the runner: a callable taking the
            "share" message and the buffers' file descriptors (it closes nothing).
    """

    def __init__(self, device: str, share) -> None:
        self.device = device
        self.share = share
        self._key = None
        self._inputs: list = []
        self._outputs: list = []
        self._fds: list[int] = []
        self._pristine: list = []
        self._out_specs: list[dict] = []
        self._device_buffers: list[SharedDeviceBuffer] = []

    def prepare(self, inputs: list, expected: list) -> tuple[dict, tuple[int, ...]]:
        """Write `inputs`, poison the slots shaped like `expected`: (message fields, fds).

        `inputs` stay the driver's pristine copy until `collect`.
        """
        in_specs, in_bytes = _layout(inputs)
        out_specs, out_bytes = _layout(
            [e if isinstance(e, torch.Tensor) else None for e in expected]
        )
        self._pristine = inputs
        self._out_specs = out_specs
        fields = {"inputs": in_specs, "outputs": out_specs}
        if self.device == "cuda":
            self._prepare_device(inputs, in_specs, out_specs, in_bytes, out_bytes)
            return fields, ()
        in_fd, in_buf = _host_buffer(in_bytes)
        out_fd, out_buf = _host_buffer(out_bytes)
        self._fds = [in_fd, out_fd]
        self._inputs = [_view(in_buf, s) if s["dtype"] else s["value"] for s in in_specs]
        for view, x in zip(self._inputs, inputs):
            if isinstance(x, torch.Tensor) and x.numel():
                view.copy_(x)
        self._outputs = [_view(out_buf, s) if s["dtype"] else None for s in out_specs]
        if out_buf is not None:
            out_buf.fill_(255)
        fields.update(input_bytes=in_bytes, output_bytes=out_bytes)
        return fields, (in_fd, out_fd)

    def _prepare_device(
        self, inputs: list, in_specs: list, out_specs: list, in_bytes: int, out_bytes: int
    ) -> None:
        key = (
            tuple((tuple(s["shape"]), s["dtype"]) for s in in_specs),
            tuple((tuple(s["shape"]), s["dtype"]) for s in out_specs),
        )
        if key != self._key:
            self.close()
            self._device_buffers = [SharedDeviceBuffer(in_bytes), SharedDeviceBuffer(out_bytes)]
            in_buf, out_buf = (b.tensor for b in self._device_buffers)
            self._inputs = [_view(in_buf, s) if s["dtype"] else None for s in in_specs]
            self._outputs = [_view(out_buf, s) if s["dtype"] else None for s in out_specs]
            fds = [b.export_fd() for b in self._device_buffers]
            try:
                self.share(
                    {
                        "kind": "share",
                        "input_bytes": in_bytes,
                        "output_bytes": out_bytes,
                        "input_alloc": self._device_buffers[0].size,
                        "output_alloc": self._device_buffers[1].size,
                    },
                    tuple(fds),
                )
            finally:
                for fd in fds:
                    os.close(fd)
            self._key = key
        for buf, x in zip(self._inputs, inputs):
            if isinstance(x, torch.Tensor):
                buf.copy_(x)
        for buf in self._outputs:
            if buf is not None:
                _poison(buf)

    def collect(self, values: list) -> tuple[list, bool]:
        """After the call: (the outputs, driver-owned copies; whether an input was modified).

        `values` are the reply's non-tensor outputs (None where a tensor goes).
        """
        outputs = [
            view.clone() if spec["dtype"] else (values[k] if k < len(values) else None)
            for k, (view, spec) in enumerate(zip(self._outputs, self._out_specs))
        ]
        mutated = any(
            isinstance(x, torch.Tensor) and not bitwise_equal(buf, x)
            for buf, x in zip(self._inputs, self._pristine)
        )
        self.release()
        return outputs, mutated

    def close(self) -> None:
        """Free the CUDA buffers (the runner keeps its own mapping until it exits)."""
        self._inputs, self._outputs = [], []
        for buf in self._device_buffers:
            buf.close()
        self._device_buffers = []
        self._key = None

    def release(self) -> None:
        """Close this call's host buffers (CUDA buffers stay for the next call)."""
        for fd in self._fds:
            os.close(fd)
        self._fds = []
        self._pristine = []
        if self.device != "cuda":
            self._inputs, self._outputs = [], []
