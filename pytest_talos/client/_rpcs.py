"""The gRPC methods the client calls: wire paths, message types and allowed roles.

Each :class:`~pytest_talos.transport.Rpc` takes the roles its method needs on a running node
from the one role table (:func:`pytest_talos.talos_api.roles_needed`, machined's authorizer
rules); they only feed the hint of a PermissionDenied error, the server decides.
"""

from __future__ import annotations

from google.protobuf import empty_pb2

from pytest_talos._proto.cluster import cluster_pb2
from pytest_talos._proto.common import common_pb2
from pytest_talos._proto.machine import machine_pb2 as m
from pytest_talos._proto.v1alpha1 import state_pb2
from pytest_talos.transport import Rpc

_MACHINE = "/machine.MachineService/"
_STATE = "/cosi.resource.State/"
Empty = empty_pb2.Empty

VERSION = Rpc(_MACHINE + "Version", Empty, m.VersionResponse)
HOSTNAME = Rpc(_MACHINE + "Hostname", Empty, m.HostnameResponse)
SERVICE_LIST = Rpc(_MACHINE + "ServiceList", Empty, m.ServiceListResponse)
SERVICE_START = Rpc(_MACHINE + "ServiceStart", m.ServiceStartRequest, m.ServiceStartResponse)
SERVICE_STOP = Rpc(_MACHINE + "ServiceStop", m.ServiceStopRequest, m.ServiceStopResponse)
SERVICE_RESTART = Rpc(
    _MACHINE + "ServiceRestart", m.ServiceRestartRequest, m.ServiceRestartResponse
)
APPLY_CONFIGURATION = Rpc(
    _MACHINE + "ApplyConfiguration",
    m.ApplyConfigurationRequest,
    m.ApplyConfigurationResponse,
)
LOGS = Rpc(_MACHINE + "Logs", m.LogsRequest, common_pb2.Data)
LOGS_CONTAINERS = Rpc(_MACHINE + "LogsContainers", Empty, m.LogsContainersResponse)
EVENTS = Rpc(_MACHINE + "Events", m.EventsRequest, m.Event)
LIST = Rpc(_MACHINE + "List", m.ListRequest, m.FileInfo)
READ = Rpc(_MACHINE + "Read", m.ReadRequest, common_pb2.Data)
KUBECONFIG = Rpc(_MACHINE + "Kubeconfig", Empty, common_pb2.Data)
NETSTAT = Rpc(_MACHINE + "Netstat", m.NetstatRequest, m.NetstatResponse)
PROCESSES = Rpc(_MACHINE + "Processes", Empty, m.ProcessesResponse)
MEMORY = Rpc(_MACHINE + "Memory", Empty, m.MemoryResponse)
MOUNTS = Rpc(_MACHINE + "Mounts", Empty, m.MountsResponse)
REBOOT = Rpc(_MACHINE + "Reboot", m.RebootRequest, m.RebootResponse)
SHUTDOWN = Rpc(_MACHINE + "Shutdown", m.ShutdownRequest, m.ShutdownResponse)
RESET = Rpc(_MACHINE + "Reset", m.ResetRequest, m.ResetResponse)
UPGRADE = Rpc(_MACHINE + "Upgrade", m.UpgradeRequest, m.UpgradeResponse)
ROLLBACK = Rpc(_MACHINE + "Rollback", m.RollbackRequest, m.RollbackResponse)
ETCD_MEMBER_LIST = Rpc(
    _MACHINE + "EtcdMemberList", m.EtcdMemberListRequest, m.EtcdMemberListResponse
)
GENERATE_CLIENT_CONFIGURATION = Rpc(
    _MACHINE + "GenerateClientConfiguration",
    m.GenerateClientConfigurationRequest,
    m.GenerateClientConfigurationResponse,
)
HEALTH_CHECK = Rpc(
    "/cluster.ClusterService/HealthCheck",
    cluster_pb2.HealthCheckRequest,
    cluster_pb2.HealthCheckProgress,
)

COSI_GET = Rpc(_STATE + "Get", state_pb2.GetRequest, state_pb2.GetResponse)
COSI_LIST = Rpc(_STATE + "List", state_pb2.ListRequest, state_pb2.ListResponse)
COSI_WATCH = Rpc(_STATE + "Watch", state_pb2.WatchRequest, state_pb2.WatchResponse)
