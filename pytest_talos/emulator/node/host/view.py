"""An emulated node's host as its machine API shows it: the root filesystem, the mounts, the
process table and the sockets (the data lives in :mod:`.system`, :mod:`.processes` and
:mod:`.sockets`; this object applies the node's faults and variants to it)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from pytest_talos.emulator.faults import FaultProfile
from pytest_talos.emulator.machineconfig.accessors import (
    cni_name,
    component_extra_args,
    kubelet_extra_args,
    kubelet_extra_config,
    proxy_disabled,
)
from pytest_talos.emulator.node.host import system
from pytest_talos.emulator.node.identity import NodeIdentity
from pytest_talos.emulator.node.net.kubespan import kubespan_enabled
from pytest_talos.emulator.node.net.wireguard import wireguard_links

__all__ = ["NodeHost"]


class NodeHost:
    """The root filesystem of one node (built once, with the faults' files) and the views of
    its host that depend on the running services and the active machine config."""

    def __init__(
        self,
        identity: NodeIdentity,
        *,
        talos_version: str,
        node_profiles: Callable[[], Sequence[FaultProfile]],
        pod_shell: bool,
        cilium: bool = False,
    ) -> None:
        self._identity = identity
        self._node_profiles = node_profiles
        self._pod_shell = pod_shell
        self._cilium = cilium
        self.rootfs = system.build_rootfs(
            hostname=identity.hostname,
            version=talos_version,
            controlplane=identity.controlplane,
            extensions=identity.extensions,
            extra_executables=[
                path for profile in node_profiles() for path in profile.rootfs_executables
            ],
        )

    def booted_version(self, version: str) -> None:
        """The node booted ``version`` (an upgrade or rollback): /etc/os-release says so."""
        release = system.os_release(version)
        self.rootfs["/etc/os-release"] = system.FileEntry("/etc/os-release", "file", 0o644, release)

    def processes(
        self, *, running_services: Sequence[str], config: bytes, pod_network_pods: int
    ) -> list[system.ProcessEntry]:
        ident = self._identity
        profiles = self._node_profiles()
        pid1 = next((p.pid1 for p in profiles if p.pid1 is not None), None)
        return system.processes_for(
            hostname=ident.hostname,
            address=ident.address,
            running_services=list(running_services),
            controlplane=ident.controlplane,
            proxy=not proxy_disabled(config),
            flannel=cni_name(config) == "flannel",
            coredns=pod_network_pods > 0,
            pod_shell=self._pod_shell,
            cilium=self._cilium,
            pid1=pid1,
            host_processes=[process for p in profiles for process in p.host_processes],
        )

    def mounts(self) -> list[system.MountEntry]:
        profiles = self._node_profiles()
        writable = {path for profile in profiles for path in profile.writable_mounts}
        return system.mounts_for(
            platform=self._identity.platform,
            extensions=len(self._identity.extensions),
            rw_root="/" in writable,
            rw_usr="/usr" in writable,
            extension_services=self._identity.extension_services,
            rw_binds=writable - {"/", "/usr"},
        )

    def listeners(
        self, *, config: bytes, pod_network_pods: int, etcd_extra_ports: Iterable[int] = ()
    ) -> list[system.Listener]:
        """The host's sockets (kube-proxy's only while the config enables it; the etcd
        listeners of the node's release), then those in pod network namespaces
        (``Listener.netns`` set: CoreDNS where it runs)."""
        profiles = self._node_profiles()
        return [
            *system.listeners_for(
                controlplane=self._identity.controlplane,
                proxy=not proxy_disabled(config),
                flannel=cni_name(config) == "flannel",
                kubespan=kubespan_enabled(config),
                etcd_extra_ports=etcd_extra_ports,
                binds=system.component_binds(
                    etcd_args=component_extra_args(config, "etcd"),
                    manager_args=component_extra_args(config, "controllerManager"),
                    scheduler_args=component_extra_args(config, "scheduler"),
                    kubelet_args=kubelet_extra_args(config),
                    kubelet_extra_config=kubelet_extra_config(config),
                ),
                wireguard_ports=[
                    link.listen_port
                    for link in wireguard_links(config, node_id=self._identity.node_id)
                ],
                added=[
                    *(system.cilium_listeners() if self._cilium else ()),
                    *(
                        system.Listener(a.port, a.process, a.bind, udp=a.udp, rejected=a.rejected)
                        for profile in profiles
                        for a in profile.listeners
                    ),
                ],
                hidden_ports={port for profile in profiles for port in profile.hidden_ports},
            ),
            *system.pod_listeners(coredns=pod_network_pods > 0, node_id=self._identity.node_id),
        ]

    def file(self, path: str, *, follow: bool, booted_at: float) -> system.FileEntry | None:
        """The entry at ``path`` as lstat (``follow``: stat) sees it, symlinked parents resolved."""
        if path == "/proc/mounts":  # generated: shows the root filesystem read-only
            content = system.proc_mounts(self.mounts())
            return system.FileEntry(path, "file", 0o444, content, mtime=int(booted_at))
        generated = path in ("/proc/version", "/proc/cmdline") and path not in self.rootfs
        if generated and self._identity.platform != "container":
            # A node that boots the image's kernel shows it; a container shares the host's
            # (the checks do not read these there), so the container emulator has neither.
            content = (
                system.proc_version()
                if path == "/proc/version"
                else system.proc_cmdline(self._identity.platform)
            )
            return system.FileEntry(path, "file", 0o444, content, mtime=int(booted_at))
        return self.rootfs.get(system.resolve(self.rootfs, path, follow_last=follow))
