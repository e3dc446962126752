"""The spec YAML of every resource is the same text with libyaml's emitter as with PyYAML's.

The emulator marshals specs with libyaml's emitter where PyYAML was built with it (four times
faster); its text must not differ from PyYAML's own emitter, which the YAML was written and
checked against (``pytest_talos/emulator/cosi/store.py``).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import yaml

from pytest_talos.emulator import EmulatedCluster
from pytest_talos.emulator.cosi.store import RawSpec, _PureSpecDumper, yaml_of
from pytest_talos.emulator.faults.variants import variant_names

pytestmark = pytest.mark.skipif(
    not getattr(yaml, "__with_libyaml__", False), reason="PyYAML without libyaml: one emitter"
)


def _differences(cluster: EmulatedCluster) -> list[str]:
    differing = []
    for node in cluster.emulated_nodes:
        resources = node.run(lambda state: list(state.store))
        for resource in resources:
            if isinstance(resource.spec, RawSpec):
                continue
            if yaml_of(resource.spec) != yaml_of(resource.spec, dumper=_PureSpecDumper):
                differing.append(f"{node.state.identity.hostname}: {resource.type}/{resource.id}")
    return differing


@pytest.mark.parametrize("variant", ["", *variant_names()])
def test_every_spec_is_the_same_text_with_either_emitter(
    make_cluster: Callable[..., EmulatedCluster], variant: str
) -> None:
    cluster = make_cluster(controlplanes=1, workers=1, variants=[variant] if variant else [])
    assert _differences(cluster) == []


def test_the_machine_config_and_a_changed_one_are_the_same_text_with_either_emitter(
    make_cluster: Callable[..., EmulatedCluster],
) -> None:
    # A staged config (two MachineConfig resources) and one with a multi-line value.
    cluster = make_cluster(faults=["config-staged"])
    assert _differences(cluster) == []
    for spec in ("a: b\nc: |\n  x\n  y\n", "", "é: ü\n", "key: 'quoted'\n" * 40):
        assert yaml_of(spec) == yaml_of(spec, dumper=_PureSpecDumper), spec
