"""GPU buffers the trusted driver owns and lends to a sandboxed runner as file descriptors.

CUDA's legacy IPC handles (`cudaIpcGetMemHandle`, what torch.multiprocessing uses) are opened by
the importer through the exporter's process id, so they fail across PID namespaces and users:
exactly what the OS sandbox puts between the driver and its runner. The driver therefore
allocates its call buffers with CUDA's virtual memory API (`cuMemCreate`, requested shareable
as a POSIX file descriptor), maps them into its own address space, and passes the descriptor
over the runner's socket (SCM_RIGHTS); the runner imports and maps it (cuda_gym/judge/runner.py
holds the importing half: it imports no judge module). A descriptor is a capability: nothing
else of the driver's memory is reachable through it.
"""

from __future__ import annotations

import ctypes
import functools

import torch

CU_MEM_ALLOCATION_TYPE_PINNED = 1
CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR = 1
CU_MEM_LOCATION_TYPE_DEVICE = 1
CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3
CU_MEM_ALLOC_GRANULARITY_RECOMMENDED = 1


class _Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class _AllocFlags(ctypes.Structure):
    _fields_ = [
        ("compressionType", ctypes.c_ubyte),
        ("gpuDirectRDMACapable", ctypes.c_ubyte),
        ("usage", ctypes.c_ushort),
        ("reserved", ctypes.c_ubyte * 4),
    ]


class _AllocationProp(ctypes.Structure):
    _fields_ = [
        ("type", ctypes.c_int),
        ("requestedHandleTypes", ctypes.c_int),
        ("location", _Location),
        ("win32HandleMetaData", ctypes.c_void_p),
        ("allocFlags", _AllocFlags),
    ]


class _AccessDesc(ctypes.Structure):
    _fields_ = [("location", _Location), ("flags", ctypes.c_int)]


class DeviceShareError(RuntimeError):
    """The CUDA driver refused a step of allocating or exporting a shared buffer."""


@functools.lru_cache(maxsize=1)
def _cuda():
    lib = ctypes.CDLL("libcuda.so.1")
    u64 = ctypes.c_uint64
    lib.cuMemGetAllocationGranularity.argtypes = [
        ctypes.POINTER(ctypes.c_size_t),
        ctypes.POINTER(_AllocationProp),
        ctypes.c_int,
    ]
    lib.cuMemCreate.argtypes = [ctypes.POINTER(u64), ctypes.c_size_t, ctypes.c_void_p, u64]
    lib.cuMemExportToShareableHandle.argtypes = [ctypes.c_void_p, u64, ctypes.c_int, u64]
    lib.cuMemAddressReserve.argtypes = [
        ctypes.POINTER(u64),
        ctypes.c_size_t,
        ctypes.c_size_t,
        u64,
        u64,
    ]
    lib.cuMemMap.argtypes = [u64, ctypes.c_size_t, ctypes.c_size_t, u64, u64]
    lib.cuMemSetAccess.argtypes = [u64, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t]
    lib.cuMemUnmap.argtypes = [u64, ctypes.c_size_t]
    lib.cuMemAddressFree.argtypes = [u64, ctypes.c_size_t]
    lib.cuMemRelease.argtypes = [u64]
    return lib


def _check(result: int, what: str) -> None:
    if result != 0:
        # 2 is CUDA_ERROR_OUT_OF_MEMORY: named, so that the judge reruns the worker alone.
        why = " (out of memory)" if result == 2 else ""
        raise DeviceShareError(f"{what} failed with CUDA driver error {result}{why}")


class _CudaArray:
    """The `__cuda_array_interface__` of a byte range, so torch can view it without owning it."""

    def __init__(self, ptr: int, nbytes: int) -> None:
        self.__cuda_array_interface__ = {
            "shape": (nbytes,),
            "typestr": "|u1",
            "data": (ptr, False),
            "version": 3,
            "strides": None,
            "stream": None,
        }


class SharedDeviceBuffer:
    """`nbytes` of GPU memory on the current device, viewable here and exportable as an fd.

    `tensor` is a uint8 CUDA tensor over the whole buffer (no copy); `export_fd()` returns a new
    file descriptor the caller sends and closes; `close()` unmaps and frees.
    """

    def __init__(self, nbytes: int) -> None:
        torch.cuda.init()
        torch.empty(1, device="cuda")  # the primary context is current in this thread
        cuda = _cuda()
        self.device = torch.cuda.current_device()
        prop = _AllocationProp()
        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED
        prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
        prop.location = _Location(CU_MEM_LOCATION_TYPE_DEVICE, self.device)
        granularity = ctypes.c_size_t(0)
        _check(
            cuda.cuMemGetAllocationGranularity(
                ctypes.byref(granularity), ctypes.byref(prop), CU_MEM_ALLOC_GRANULARITY_RECOMMENDED
            ),
            "cuMemGetAllocationGranularity",
        )
        step = max(1, granularity.value)
        self.size = max(step, (nbytes + step - 1) // step * step)
        self.nbytes = nbytes
        self.handle = ctypes.c_uint64(0)
        _check(
            cuda.cuMemCreate(ctypes.byref(self.handle), self.size, ctypes.byref(prop), 0),
            "cuMemCreate",
        )
        self.ptr = ctypes.c_uint64(0)
        try:
            _check(
                cuda.cuMemAddressReserve(ctypes.byref(self.ptr), self.size, 0, 0, 0),
                "cuMemAddressReserve",
            )
            _check(cuda.cuMemMap(self.ptr.value, self.size, 0, self.handle.value, 0), "cuMemMap")
            access = _AccessDesc(
                _Location(CU_MEM_LOCATION_TYPE_DEVICE, self.device),
                CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
            )
            _check(
                cuda.cuMemSetAccess(self.ptr.value, self.size, ctypes.byref(access), 1),
                "cuMemSetAccess",
            )
        except DeviceShareError:
            self.close()
            raise
        self.tensor = torch.as_tensor(_CudaArray(self.ptr.value, max(1, nbytes)), device="cuda")

    def export_fd(self) -> int:
        """A new file descriptor for this buffer (the caller sends it, then closes it)."""
        fd = ctypes.c_int(-1)
        _check(
            _cuda().cuMemExportToShareableHandle(
                ctypes.byref(fd), self.handle.value, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0
            ),
            "cuMemExportToShareableHandle",
        )
        return fd.value

    def close(self) -> None:
        """Unmap and free the buffer (tensors viewing it must be gone)."""
        cuda = _cuda()
        self.tensor = None
        if self.ptr.value:
            torch.cuda.synchronize()
            cuda.cuMemUnmap(self.ptr.value, self.size)
            cuda.cuMemAddressFree(self.ptr.value, self.size)
            self.ptr = ctypes.c_uint64(0)
        if self.handle.value:
            cuda.cuMemRelease(self.handle.value)
            self.handle = ctypes.c_uint64(0)
