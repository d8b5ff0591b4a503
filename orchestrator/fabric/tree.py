"""Write a simulated node's files under its root, each replaced atomically (temp file + rename).

An exporter scraping the tree while the simulator writes it sees every file either before or
after a step, never half written. Only files whose text changed are rewritten.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Final

from orchestrator.core.files import atomic_write_text

SYSFS_DIR: Final = "sys"
ETHTOOL_DIR: Final = "ethtool"
SCRATCH_DIR: Final = ".scratch"
MLX5_DRIVER_LINK: Final = "../../../../bus/pci/drivers/mlx5_core"


class NodeTree:
    """One node's view on disk: `<root>/sys` (plays `/sys`) and `<root>/ethtool/<netdev>.txt`."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._written: dict[str, str] = {}
        # Temporary files live outside the tree, so a reader listing a directory never sees one.
        self._scratch = root / SCRATCH_DIR
        self._scratch.mkdir(parents=True, exist_ok=True)

    @property
    def sysfs_root(self) -> Path:
        return self.root / SYSFS_DIR

    @property
    def ethtool_dir(self) -> Path:
        return self.root / ETHTOOL_DIR

    def link_driver(self, devices: tuple[str, ...]) -> None:
        """Bind each RDMA device to mlx5 the way sysfs shows it (`device/driver` symlink)."""
        for device in devices:
            link = self.sysfs_root / "class/infiniband" / device / "device" / "driver"
            if not link.is_symlink():
                link.parent.mkdir(parents=True, exist_ok=True)
                link.symlink_to(MLX5_DRIVER_LINK)

    def write(self, files: Mapping[str, str]) -> int:
        """Write `files` (paths as `model.files()` names them); returns how many changed."""
        changed = 0
        for rel, text in files.items():
            if self._written.get(rel) == text:
                continue
            ethtool = rel.startswith(f"{ETHTOOL_DIR}/")
            path = self.root / rel if ethtool else self.sysfs_root / rel
            atomic_write_text(path, text + "\n", scratch_dir=self._scratch)
            self._written[rel] = text
            changed += 1
        return changed
