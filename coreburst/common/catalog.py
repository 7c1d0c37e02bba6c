"""The catalog: instance facts and prices, loaded from ``coreburst/common/data/catalog.yaml``.

Every number the project uses (infra estimates, policies, guardrail burn rates, the TCO
advisor) comes from here, so a price change is one edit in one data file.

    >>> from coreburst.common.catalog import load_catalog
    >>> cat = load_catalog()
    >>> cat.instance("p5.48xlarge").efa_interfaces.value
    32
    >>> cat.on_demand_price("p5.48xlarge", "us-east-1")
    55.04
"""

from __future__ import annotations

import functools
import math
import re
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from coreburst.common.errors import one_line
from coreburst.common.textio import read_text

CATALOG_PATH = Path(__file__).parent / "data" / "catalog.yaml"


class CatalogError(ValueError):
    """The catalog file is missing, malformed, or lacks a figure someone asked for."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# When a source was read: a month or a day.
_DATE = re.compile(r"20\d\d-(0[1-9]|1[0-2])(-(0[1-9]|[12]\d|3[01]))?")


class Source(_Strict):
    """Where the figures that cite one source key come from.

    ``url``: the public page a reader can check the figures against; ``file``: a file in this
    repository that records what was taken (a path from the repository root, ``#section``
    allowed), for a source that is not a public page (a recorded snapshot, our own estimate).
    At least one of them; ``read``: when the page was read (required with ``url``);
    ``took``: what was taken from it. ``docs/sources.md`` explains each key.
    """

    title: str
    url: str | None = None
    file: str | None = None
    read: str | None = None
    took: str

    @model_validator(mode="after")
    def _resolvable(self) -> Source:
        if self.url is None and self.file is None:
            raise ValueError(f"{self.title!r}: give url (a public page) or file (in the repo)")
        if self.url is not None and not self.url.startswith("https://"):
            raise ValueError(f"url {self.url!r}: give an https:// address")
        if self.file is not None:
            path = self.file.split("#", 1)[0]
            if not path or path.startswith("/") or ".." in Path(path).parts:
                raise ValueError(f"file {self.file!r}: give a path inside the repository")
        if self.url is not None and self.read is None:
            raise ValueError(f"{self.title!r}: say when {self.url} was read (read: YYYY-MM)")
        if self.read is not None and not _DATE.fullmatch(self.read):
            raise ValueError(f"read {self.read!r}: give a date, YYYY-MM or YYYY-MM-DD")
        return self

    @property
    def where(self) -> str:
        """Where to look, for a footer: ``https://... (read 2025-06)``, the file, or both
        (``https://... (read 2026-11; recorded in docs/sources.md#x)``)."""
        if self.url is None:
            return str(self.file)
        recorded = f"; recorded in {self.file}" if self.file else ""
        return f"{self.url} (read {self.read}{recorded})"


class Figure(_Strict):
    """One number with its provenance."""

    value: float
    as_of: str
    source: str
    unverified: bool = False

    @property
    def cited(self) -> str:
        """``source as_of``, `` unverified`` added where it is: how every output cites it.

        >>> Figure(value=1, as_of="2025-06", source="estimate", unverified=True).cited
        'estimate 2025-06 unverified'
        """
        return f"{self.source} {self.as_of}" + (" unverified" if self.unverified else "")


class IntFigure(_Strict):
    value: int
    as_of: str
    source: str
    unverified: bool = False


class NeuronCores(_Strict):
    """The NeuronCores of one Trainium chip and the logical-core sizes its runtime accepts.

    The Neuron runtime groups ``logical_core_size`` physical cores into one logical NeuronCore
    (LNC, ``NEURON_LOGICAL_NC_CONFIG``); neuron-monitor reports logical cores, so a node shows
    ``chips * physical_per_chip / LNC`` of them (trn2.48xlarge: 16 * 8 / 2 = 64 at the default).
    """

    physical_per_chip: int = Field(gt=0)
    logical_core_sizes: list[int] = Field(min_length=1)
    default_logical_core_size: int = Field(gt=0)
    as_of: str
    source: str
    unverified: bool = False

    @model_validator(mode="after")
    def _sizes(self) -> NeuronCores:
        bad = [s for s in self.logical_core_sizes if s <= 0 or self.physical_per_chip % s]
        if bad:
            raise ValueError(
                f"logical_core_sizes {bad} do not divide physical_per_chip {self.physical_per_chip}"
            )
        if self.default_logical_core_size not in self.logical_core_sizes:
            raise ValueError(
                f"default_logical_core_size {self.default_logical_core_size} is not one of "
                f"logical_core_sizes {self.logical_core_sizes}"
            )
        return self


class Accelerator(_Strict):
    kind: Literal["nvidia", "neuron"]
    model: str
    count: int = Field(gt=0)
    memory_gib: int = Field(gt=0)
    # Trainium/Inferentia only: how many NeuronCores each chip shows (required for neuron).
    neuron_cores: NeuronCores | None = None

    @model_validator(mode="after")
    def _cores(self) -> Accelerator:
        if self.kind == "neuron" and self.neuron_cores is None:
            raise ValueError(f"{self.model}: a neuron accelerator needs neuron_cores")
        if self.kind != "neuron" and self.neuron_cores is not None:
            raise ValueError(f"{self.model}: neuron_cores is for neuron accelerators only")
        return self

    def utilization_series(self, logical_core_size: int | None = None) -> int:
        """How many per-device utilization series a node of this type publishes: one per GPU,
        or one per logical NeuronCore at ``logical_core_size`` (None: the runtime's default).
        Raises ``CatalogError`` for a size this chip does not accept.

        >>> cat = load_catalog()
        >>> acc = cat.instance("trn2.48xlarge").accelerator
        >>> acc.utilization_series(), acc.utilization_series(1)
        (64, 128)
        >>> cat.instance("p5.48xlarge").accelerator.utilization_series()
        8
        """
        nc = self.neuron_cores
        if nc is None:
            return self.count
        size = nc.default_logical_core_size if logical_core_size is None else logical_core_size
        if size not in nc.logical_core_sizes:
            raise CatalogError(
                f"logical NeuronCore size {size} is not one {self.model} accepts "
                f"({', '.join(map(str, nc.logical_core_sizes))})"
            )
        return self.count * nc.physical_per_chip // size

    def max_utilization_series(self) -> int:
        """The most series a node can publish (neuron: every physical core, LNC=1 or lowest)."""
        nc = self.neuron_cores
        if nc is None:
            return self.count
        return self.count * nc.physical_per_chip // min(nc.logical_core_sizes)


class InstanceType(_Strict):
    family: str
    accelerator: Accelerator
    vcpus: int
    memory_gib: int
    network_cards: int
    efa_interfaces: IntFigure
    power_kw: Figure
    on_demand_usd_per_hour: dict[str, Figure]
    capacity_block_usd_per_hour: dict[str, Figure] = {}

    @property
    def efa_supported(self) -> bool:
        return self.efa_interfaces.value > 0


class EgressTier(_Strict):
    up_to_gb: float | None
    usd_per_gb: Figure


class DataTransfer(_Strict):
    internet_out_tiers: list[EgressTier]
    direct_connect_out_usd_per_gb: Figure
    cross_az_usd_per_gb: Figure


class NatGateway(_Strict):
    usd_per_hour: Figure
    usd_per_gb: Figure


class CustomMetricTier(_Strict):
    up_to_metrics: int | None
    usd_per_metric_month: Figure


class CloudWatchPrices(_Strict):
    """What the guardrails' own CloudWatch use costs (their reads are a bill too)."""

    # GetMetricData bills each metric requested (each MetricDataQuery in a call).
    get_metric_data_usd_per_1000_metrics: Figure
    # ListMetrics, PutMetricData and the other API requests, per 1,000 requests.
    api_usd_per_1000_requests: Figure
    # Each custom metric (name + dimension set) published, per month, tiered over the account's
    # custom metrics (priced by coreburst.common.cloudwatch_cost).
    custom_metric_tiers: list[CustomMetricTier] = Field(min_length=1)

    @model_validator(mode="after")
    def _tiers_ascend(self) -> CloudWatchPrices:
        bounds = [t.up_to_metrics for t in self.custom_metric_tiers]
        if bounds[-1] is not None or None in bounds[:-1]:
            raise ValueError("cloudwatch.custom_metric_tiers: only the last tier has no bound")
        given = [b for b in bounds if b is not None]
        if any(b <= a for a, b in zip([0, *given], given, strict=False)):
            raise ValueError("cloudwatch.custom_metric_tiers: bounds must rise above 0")
        return self


class Catalog(_Strict):
    schema_: int = Field(alias="schema")
    currency: Literal["USD"]
    hours_per_month: float
    sources: dict[str, Source]
    instances: dict[str, InstanceType]
    spot_fraction_of_on_demand: Figure
    ami_ssm_parameters: dict[Literal["nvidia", "neuron"], str]
    fsx_lustre_usd_per_gb_month: dict[str, dict[str, Figure]]
    direct_connect_port_usd_per_hour: dict[str, Figure]
    data_transfer: DataTransfer
    nat_gateway: NatGateway
    vpc_interface_endpoint_usd_per_hour: Figure
    ebs_gp3_usd_per_gb_month: Figure
    # Optional so older catalog files still load; coreburst.common.pricing refuses to price an item
    # whose
    # figure is missing (never prices it as zero).
    public_ipv4_usd_per_hour: Figure | None = None
    transit_gateway_attachment_usd_per_hour: Figure | None = None
    site_to_site_vpn_connection_usd_per_hour: Figure | None = None
    secrets_manager_secret_usd_per_month: Figure | None = None
    cloudwatch: CloudWatchPrices | None = None

    # -- lookups --------------------------------------------------------------------------
    def instance(self, instance_type: str) -> InstanceType:
        try:
            return self.instances[instance_type]
        except KeyError:
            raise CatalogError(
                f"instance type {instance_type!r} is not in the catalog; known: "
                f"{', '.join(sorted(self.instances))}"
            ) from None

    def on_demand_price(self, instance_type: str, region: str) -> float:
        prices = self.instance(instance_type).on_demand_usd_per_hour
        if region not in prices:
            raise CatalogError(
                f"no on-demand price for {instance_type} in {region}; catalog has "
                f"{', '.join(sorted(prices))}"
            )
        return prices[region].value

    def capacity_block_price(self, instance_type: str, region: str) -> float:
        prices = self.instance(instance_type).capacity_block_usd_per_hour
        if region not in prices:
            raise CatalogError(
                f"no Capacity Block price for {instance_type} in {region}; catalog has "
                f"{', '.join(sorted(prices)) or 'none'}"
            )
        return prices[region].value

    def spot_estimate(self, instance_type: str, region: str) -> float:
        """Offline spot estimate; the guardrails use the live spot price history instead."""
        return self.on_demand_price(instance_type, region) * self.spot_fraction_of_on_demand.value

    def hourly_price(self, instance_type: str, region: str, market: str) -> float:
        """$/h for one node by capacity model (a reservation bills at the on-demand rate)."""
        if market == "spot":
            return self.spot_estimate(instance_type, region)
        if market == "capacity-block":
            return self.capacity_block_price(instance_type, region)
        if market in ("on-demand", "capacity-reservation"):
            return self.on_demand_price(instance_type, region)
        raise CatalogError(f"unknown market {market!r}")

    def lustre_price(self, deployment_type: str, throughput: int | None) -> float:
        tiers = self.fsx_lustre_usd_per_gb_month.get(deployment_type)
        key = str(throughput or 0)
        if tiers is None or key not in tiers:
            raise CatalogError(
                f"no FSx for Lustre price for {deployment_type} at {throughput} MB/s/TiB"
            )
        return tiers[key].value

    def dx_port_price(self, bandwidth: str) -> float:
        try:
            return self.direct_connect_port_usd_per_hour[bandwidth].value
        except KeyError:
            raise CatalogError(
                f"no Direct Connect port price for {bandwidth}; known: "
                f"{', '.join(self.direct_connect_port_usd_per_hour)}"
            ) from None

    def internet_egress_cost(self, gb: float, already_gb: float = 0.0) -> float:
        """Cost of ``gb`` more internet egress this month, after ``already_gb`` were sent.

        The tiers are cumulative per month, so the same GB costs less late in a busy month.
        """
        if gb < 0 or already_gb < 0:
            raise ValueError("egress volume cannot be negative")
        cost, lower = 0.0, 0.0
        start, end = already_gb, already_gb + gb
        for tier in self.data_transfer.internet_out_tiers:
            upper = math.inf if tier.up_to_gb is None else tier.up_to_gb
            overlap = max(0.0, min(end, upper) - max(start, lower))
            cost += overlap * tier.usd_per_gb.value
            lower = upper
        return cost

    def figures(self) -> list[tuple[str, Figure | IntFigure | NeuronCores]]:
        """Every figure with its dotted path (``instances.p5.48xlarge.power_kw``)."""
        found: list[tuple[str, Figure | IntFigure | NeuronCores]] = []

        def walk(node: object, path: str) -> None:
            if isinstance(node, Figure | IntFigure | NeuronCores):
                found.append((path, node))
            elif isinstance(node, BaseModel):
                for name in type(node).model_fields:
                    walk(getattr(node, name), f"{path}.{name}" if path else name)
            elif isinstance(node, dict):
                for k, v in node.items():
                    walk(v, f"{path}.{k}")
            elif isinstance(node, list):
                for i, v in enumerate(node):
                    walk(v, f"{path}[{i}]")

        walk(self, "")
        return found

    def unverified_figures(self) -> list[str]:
        """Dotted paths of every figure marked unverified, for reports and reviews."""
        return [path for path, fig in self.figures() if fig.unverified]

    def source_of(self, key: str) -> Source:
        """The ``sources`` entry a figure cites (every key a figure cites is listed)."""
        try:
            return self.sources[key]
        except KeyError:
            raise CatalogError(f"source {key!r} is not in the catalog's sources") from None

    @model_validator(mode="after")
    def _every_source_listed(self) -> Catalog:
        missing = [
            f"{path} cites {fig.source!r}"
            for path, fig in self.figures()
            if fig.source not in self.sources
        ]
        if missing:
            raise ValueError(
                f"{missing[0]}, which sources does not list (add it under sources: with a url "
                "or a file)"
            )
        return self


def parse_catalog(text: str, origin: str = "<catalog>") -> Catalog:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise CatalogError(f"{origin}: not valid YAML ({exc})") from None
    try:
        return Catalog.model_validate(data)
    except ValidationError as exc:
        raise CatalogError(one_line(exc, origin)) from None


@functools.cache
def load_catalog(path: Path = CATALOG_PATH) -> Catalog:
    return parse_catalog(read_text(path, "catalog", CatalogError), str(path))
