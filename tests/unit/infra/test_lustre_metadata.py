"""USER_PROVISIONED Metadata IOPS: the values AWS allows, and never fewer than AUTOMATIC mode
provisions for the file system's capacity (CreateFileSystem rejects that).

Sources:
- botocore's FSx service model, CreateFileSystemLustreMetadataConfiguration.Iops: "valid values
  are 1500, 3000, 6000, 12000, and multiples of 12000 up to a maximum of 192000" and "You can't
  provision fewer Metadata IOPS than AUTOMATIC mode provisions for your file system."
- FSx for Lustre user guide, "Amazon FSx for Lustre performance", section "File system metadata
  performance" (https://docs.aws.amazon.com/fsx/latest/LustreGuide/performance.html
  #dne-metadata-performance): Metadata IOPS included in Automatic mode per SSD storage capacity,
  the table below. That page's text was not in the reference corpus this was written from; the
  rows are as a public summary of it quotes them (1.2 TiB 1500, 2.4 TiB 3000, 4.8-9.6 TiB 6000,
  12-45.6 TiB 12000, >=48 TiB 12000 per 24 TiB). The 2400 GiB row is independently what
  hashicorp/terraform-provider-aws PR #44456 ran into against the real API ("if storage_capacity
  is increased from 1200 to 2400, metadata_configuration.iops must be at least 3000").
"""

from __future__ import annotations

import re
from typing import Any

import botocore.session
import pytest

from infra.config import StackConfigError, automatic_metadata_iops
from infra.offline import evaluate_config

# (storage capacity GiB, Metadata IOPS in Automatic mode), from the user guide's table:
# 1.2 TiB -> 1500, 2.4 TiB -> 3000, 4.8-9.6 TiB -> 6000, 12-45.6 TiB -> 12000,
# >= 48 TiB -> 12000 per 24 TiB.
AUTOMATIC_TABLE = [
    (1200, 1500),
    (2400, 3000),
    (4800, 6000),
    (7200, 6000),
    (9600, 6000),
    (12000, 12000),
    (38400, 12000),
    (45600, 12000),
    (48000, 24000),
    (72000, 36000),
    (96000, 48000),
    (384000, 192000),
]


def _iops_doc() -> tuple[str, dict[str, Any]]:
    model = botocore.session.get_session().get_service_model("fsx")
    shape = model.shape_for("CreateFileSystemLustreMetadataConfiguration").members["Iops"]
    return shape.documentation, shape.metadata


def _allowed_by_botocore(iops: int) -> bool:
    doc, bounds = _iops_doc()
    # "For SSD file systems, valid values are <code>1500</code>, ... multiples of <code>12000</code>
    # up to a maximum of <code>192000</code>."
    ssd = re.search(r"For SSD file systems, valid values are (.*?)</p>", doc)
    assert ssd, doc
    listed = [int(n) for n in re.findall(r"<code>(\d+)</code>", ssd.group(1))]
    *small, step, top = listed
    assert (bounds["min"], bounds["max"]) == (small[0], top)
    return iops in small or (iops % step == 0 and step <= iops <= top)


def test_botocore_states_the_floor() -> None:
    doc, _ = _iops_doc()
    assert "can't provision fewer Metadata IOPS than AUTOMATIC mode provisions" in doc


@pytest.mark.parametrize(("capacity", "iops"), AUTOMATIC_TABLE)
def test_automatic_mode_table(capacity: int, iops: int) -> None:
    assert automatic_metadata_iops(capacity) == iops
    assert _allowed_by_botocore(automatic_metadata_iops(capacity))


def _lustre(cfg: dict[str, Any], capacity: int, iops: int) -> dict[str, Any]:
    cfg["coreburst:lustre"].update(
        storageCapacityGib=capacity,
        perUnitStorageThroughput=125,
        efaEnabled=False,
        metadata={"mode": "USER_PROVISIONED", "iops": iops},
    )
    return cfg


@pytest.mark.parametrize(("capacity", "floor"), AUTOMATIC_TABLE)
def test_user_provisioned_below_automatic_is_rejected(
    dev_config: dict[str, Any], capacity: int, floor: int
) -> None:
    below = [v for v in (1500, 3000, 6000, *range(12000, 192001, 12000)) if v < floor]
    for iops in below:
        with pytest.raises(StackConfigError) as exc:
            evaluate_config("bad", _lustre(dev_config, capacity, iops))
        assert str(exc.value) == (
            f"coreburst:lustre: metadata.iops {iops} is below the {floor} Metadata IOPS that "
            f"AUTOMATIC mode provisions for storageCapacityGib {capacity}: use at least {floor} "
            "(or mode AUTOMATIC)"
        )
    # exactly the floor is accepted
    ev = evaluate_config("ok", _lustre(dev_config, capacity, floor))
    fs = ev.of_type("aws:fsx/lustreFileSystem:LustreFileSystem")[0].inputs
    assert fs["metadataConfiguration"] == {"mode": "USER_PROVISIONED", "iops": floor}


@pytest.mark.parametrize(
    "iops", [1000, 1500, 2000, 3000, 4500, 6000, 9000, 12000, 18000, 24000, 180000, 192000, 204000]
)
def test_allowed_values_match_botocore(dev_config: dict[str, Any], iops: int) -> None:
    """At 1200 GiB the floor is 1500, so only the value set itself decides."""
    cfg = _lustre(dev_config, 1200, iops)
    if _allowed_by_botocore(iops):
        evaluate_config("ok", cfg)
    else:
        with pytest.raises(StackConfigError, match="is not allowed"):
            evaluate_config("bad", cfg)


def test_prod_metadata_meets_its_floor(prod_config: dict[str, Any]) -> None:
    lustre = prod_config["coreburst:lustre"]
    assert lustre["metadata"]["iops"] >= automatic_metadata_iops(lustre["storageCapacityGib"])
