"""EFA network-interface layout for a launch template (pure; the current EC2 layout).

Card 0 carries the node's one ENA interface at device index 0 and an ``efa-only`` interface at
device index 1; every other card carries one ``efa-only`` interface at device index 0.
``efa-only`` interfaces use no private IP, so a 32-card p5 node takes one address from the
subnet, not 32. A card may hold at most two devices, so giving cards indices 1, 2, 3, … fails.

    >>> [(i.network_card_index, i.device_index, i.interface_type) for i in efa_layout(3)]
    [(0, 0, 'interface'), (0, 1, 'efa-only'), (1, 0, 'efa-only'), (2, 0, 'efa-only')]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class Interface:
    network_card_index: int
    device_index: int
    interface_type: Literal["interface", "efa-only"]


def efa_layout(efa_interfaces: int) -> list[Interface]:
    """Interfaces for a node with ``efa_interfaces`` EFA devices (one per network card).

    With ``efa_interfaces == 0`` (EFA off) the node gets a single ENA interface.
    """
    if efa_interfaces < 0:
        raise ValueError("efa_interfaces cannot be negative")
    layout = [Interface(0, 0, "interface")]
    if efa_interfaces:
        layout.append(Interface(0, 1, "efa-only"))
        layout.extend(Interface(card, 0, "efa-only") for card in range(1, efa_interfaces))
    return layout
