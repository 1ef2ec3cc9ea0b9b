"""WeightReader: the interface every checkpoint format implements (readers.py, gguf_reader.py build on it)."""

from __future__ import annotations

from pathlib import Path

from eagle_trt.errors import EagleTrtError


class WeightReader:
    """Names, shapes and dtypes of a checkpoint's tensors, and each tensor on demand (`get`)."""

    def __init__(self, path: Path, fmt: str):
        self.path, self.format = path, fmt
        self._meta: dict[str, tuple[tuple[int, ...], str]] = {}

    def names(self) -> list[str]:
        return list(self._meta)

    def shape(self, name: str) -> tuple[int, ...]:
        return self._meta[self._check(name)][0]

    def dtype(self, name: str) -> str:
        return self._meta[self._check(name)][1]

    def __contains__(self, name: str) -> bool:
        return name in self._meta

    def _check(self, name: str) -> str:
        if name not in self._meta:
            raise EagleTrtError(f"tensor {name!r} is not in the checkpoint {self.path}",
                                "check that the directory holds the model you meant")
        return name

    def get(self, name: str):  # -> torch.Tensor
        raise NotImplementedError

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()
