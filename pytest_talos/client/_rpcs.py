"""The gRPC methods the client calls: wire paths, message types and allowed roles.

Roles follow the machined authorizer table
(``internal/app/machined/pkg/system/services/machined.go``); they only feed the hint of a
PermissionDenied error, the server decides.
"""

from __future__ import annotations

from google.protobuf import empty_pb2

from pytest_talos._proto.cluster import cluster_pb2
from pytest_talos._proto.common import common_pb2
from pytest_talos._proto.machine import machine_pb2 as m
from pytest_talos._proto.v1alpha1 import state_pb2
from pytest_talos.transport import Rpc

ADMIN = ("os:admin",)
OPERATOR = ("os:admin", "os:operator")
READER = ("os:admin", "os:operator", "os:reader")
ETCD_READER = (*READER, "os:etcd:backup")

_MACHINE = "/machine.MachineService/"
_STATE = "/cosi.resource.State/"
Empty = empty_pb2.Empty

VERSION = Rpc(_MACHINE + "Version", Empty, m.VersionResponse, READER)
HOSTNAME = Rpc(_MACHINE + "Hostname", Empty, m.HostnameResponse, READER)
SERVICE_LIST = Rpc(_MACHINE + "ServiceList", Empty, m.ServiceListResponse, READER)
SERVICE_START = Rpc(
    _MACHINE + "ServiceStart", m.ServiceStartRequest, m.ServiceStartResponse, OPERATOR
)
SERVICE_STOP = Rpc(_MACHINE + "ServiceStop", m.ServiceStopRequest, m.ServiceStopResponse, OPERATOR)
SERVICE_RESTART = Rpc(
    _MACHINE + "ServiceRestart", m.ServiceRestartRequest, m.ServiceRestartResponse, OPERATOR
)
APPLY_CONFIGURATION = Rpc(
    _MACHINE + "ApplyConfiguration",
    m.ApplyConfigurationRequest,
    m.ApplyConfigurationResponse,
    ADMIN,
)
LOGS = Rpc(_MACHINE + "Logs", m.LogsRequest, common_pb2.Data, READER)
LOGS_CONTAINERS = Rpc(_MACHINE + "LogsContainers", Empty, m.LogsContainersResponse, READER)
EVENTS = Rpc(_MACHINE + "Events", m.EventsRequest, m.Event, READER)
LIST = Rpc(_MACHINE + "List", m.ListRequest, m.FileInfo, READER)
READ = Rpc(_MACHINE + "Read", m.ReadRequest, common_pb2.Data, ADMIN)
KUBECONFIG = Rpc(_MACHINE + "Kubeconfig", Empty, common_pb2.Data, ADMIN)
NETSTAT = Rpc(_MACHINE + "Netstat", m.NetstatRequest, m.NetstatResponse, READER)
PROCESSES = Rpc(_MACHINE + "Processes", Empty, m.ProcessesResponse, READER)
MEMORY = Rpc(_MACHINE + "Memory", Empty, m.MemoryResponse, READER)
MOUNTS = Rpc(_MACHINE + "Mounts", Empty, m.MountsResponse, READER)
REBOOT = Rpc(_MACHINE + "Reboot", m.RebootRequest, m.RebootResponse, OPERATOR)
SHUTDOWN = Rpc(_MACHINE + "Shutdown", m.ShutdownRequest, m.ShutdownResponse, OPERATOR)
RESET = Rpc(_MACHINE + "Reset", m.ResetRequest, m.ResetResponse, ADMIN)
UPGRADE = Rpc(_MACHINE + "Upgrade", m.UpgradeRequest, m.UpgradeResponse, ADMIN)
ROLLBACK = Rpc(_MACHINE + "Rollback", m.RollbackRequest, m.RollbackResponse, ADMIN)
ETCD_MEMBER_LIST = Rpc(
    _MACHINE + "EtcdMemberList", m.EtcdMemberListRequest, m.EtcdMemberListResponse, ETCD_READER
)
GENERATE_CLIENT_CONFIGURATION = Rpc(
    _MACHINE + "GenerateClientConfiguration",
    m.GenerateClientConfigurationRequest,
    m.GenerateClientConfigurationResponse,
    ADMIN,
)
HEALTH_CHECK = Rpc(
    "/cluster.ClusterService/HealthCheck",
    cluster_pb2.HealthCheckRequest,
    cluster_pb2.HealthCheckProgress,
    READER,
)

COSI_GET = Rpc(_STATE + "Get", state_pb2.GetRequest, state_pb2.GetResponse, READER)
COSI_LIST = Rpc(_STATE + "List", state_pb2.ListRequest, state_pb2.ListResponse, READER)
COSI_WATCH = Rpc(_STATE + "Watch", state_pb2.WatchRequest, state_pb2.WatchResponse, READER)
