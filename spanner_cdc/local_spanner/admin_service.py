"""InstanceAdmin, DatabaseAdmin and long-running Operations of the local server (every operation finishes at once)."""

from __future__ import annotations

import re
import secrets
import threading
from collections.abc import Callable
from typing import Any

import grpc
from google.cloud.spanner_admin_database_v1 import types as db_types
from google.cloud.spanner_admin_instance_v1 import types as inst_types
from google.longrunning import operations_pb2
from google.protobuf import any_pb2, empty_pb2, message

from spanner_cdc.local_spanner.catalog import Catalog, Database, DdlOperation, Instance
from spanner_cdc.local_spanner.model import QueryError
from spanner_cdc.local_spanner.spanner_service import abort, pb_timestamp
from spanner_cdc.local_spanner.transactions import duration_text

_READY = 2  # State.READY of instances and databases
_CREATE_DATABASE = re.compile(r"^\s*CREATE\s+DATABASE\s+(`[^`]+`|\"[^\"]+\"|[A-Za-z_][\w-]*)\s*;?\s*$", re.IGNORECASE)
_FILTER_TERM = re.compile(r"^\(?\s*([\w.@]+)\s*([:=])\s*\"?([^\s\"()]*)\"?\s*\)?$")
EMULATOR_CONFIG = "emulator-config"


def _pack(value: message.Message) -> any_pb2.Any:
    packed = any_pb2.Any()
    packed.Pack(value)
    return packed


class AdminService:
    """Admin RPCs over the catalog; operations are returned already done (DDL applies synchronously)."""

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog
        self._lock = threading.Lock()
        self._operations: dict[str, operations_pb2.Operation] = {}

    def _operation(self, name: str, metadata: message.Message, response: message.Message) -> bytes:
        operation = operations_pb2.Operation(name=name, done=True)
        operation.metadata.CopyFrom(_pack(metadata))
        operation.response.CopyFrom(_pack(response))
        with self._lock:
            self._operations[name] = operation
        return operation.SerializeToString()

    # -- instances ------------------------------------------------------------------------------

    def _instance_pb(self, instance: Instance) -> Any:
        message_ = inst_types.Instance.pb()(
            name=instance.name, config=instance.config, display_name=instance.display_name,
            node_count=instance.node_count, processing_units=instance.processing_units, state=_READY,
        )
        message_.labels.update(instance.labels)
        if instance.create_time is not None:
            message_.create_time.CopyFrom(pb_timestamp(instance.create_time))
            message_.update_time.CopyFrom(pb_timestamp(instance.create_time))
        return message_

    def create_instance(self, request: Any, context: grpc.ServicerContext) -> bytes:
        name = f"{request.parent}/instances/{request.instance_id}"
        given = request.instance
        nodes = given.node_count or (given.processing_units // 1000 if given.processing_units else 1)
        instance = self.catalog.create_instance(Instance(
            name=name, config=given.config or f"{request.parent}/instanceConfigs/{EMULATOR_CONFIG}",
            display_name=given.display_name or request.instance_id, node_count=max(1, nodes),
            processing_units=given.processing_units or max(1, nodes) * 1000, labels=dict(given.labels),
        ))
        assert instance.create_time is not None
        metadata = inst_types.CreateInstanceMetadata.pb()(instance=self._instance_pb(instance))
        metadata.start_time.CopyFrom(pb_timestamp(instance.create_time))
        metadata.end_time.CopyFrom(pb_timestamp(instance.create_time))
        return self._operation(f"{name}/operations/create_{secrets.token_hex(6)}", metadata, self._instance_pb(instance))

    def get_instance(self, request: Any, context: grpc.ServicerContext) -> bytes:
        return self._instance_pb(self.catalog.instance(request.name)).SerializeToString()

    def list_instances(self, request: Any, context: grpc.ServicerContext) -> bytes:
        instances = [i for i in self.catalog.instances.values() if i.name.startswith(request.parent + "/")]
        return inst_types.ListInstancesResponse.pb()(instances=[self._instance_pb(i) for i in instances]).SerializeToString()

    def delete_instance(self, request: Any, context: grpc.ServicerContext) -> bytes:
        self.catalog.delete_instance(request.name)
        return empty_pb2.Empty().SerializeToString()

    def _config_pb(self, name: str) -> Any:
        return inst_types.InstanceConfig.pb()(name=name, display_name="Local Spanner server")

    def list_instance_configs(self, request: Any, context: grpc.ServicerContext) -> bytes:
        config = self._config_pb(f"{request.parent}/instanceConfigs/{EMULATOR_CONFIG}")
        return inst_types.ListInstanceConfigsResponse.pb()(instance_configs=[config]).SerializeToString()

    def get_instance_config(self, request: Any, context: grpc.ServicerContext) -> bytes:
        return self._config_pb(request.name).SerializeToString()

    # -- databases ------------------------------------------------------------------------------

    def _database_pb(self, database: Database) -> Any:
        message_ = db_types.Database.pb()(
            name=database.name, state=_READY, version_retention_period=duration_text(database.version_retention),
            database_dialect=database.dialect,
        )
        message_.create_time.CopyFrom(pb_timestamp(database.create_time))
        message_.earliest_version_time.CopyFrom(pb_timestamp(database.earliest_version_time(self.catalog.now())))
        return message_

    def create_database(self, request: Any, context: grpc.ServicerContext) -> bytes:
        match = _CREATE_DATABASE.match(request.create_statement)
        if match is None:
            raise QueryError("INVALID_ARGUMENT", f"Invalid create_statement {request.create_statement!r}: expected CREATE DATABASE <name>")
        database_id = match.group(1).strip('`"')
        name = f"{request.parent}/databases/{database_id}"
        database, _ = self.catalog.create_database(name, request.database_dialect, list(request.extra_statements))
        metadata = db_types.CreateDatabaseMetadata.pb()(database=name)
        return self._operation(f"{name}/operations/create_{secrets.token_hex(6)}", metadata, self._database_pb(database))

    def get_database(self, request: Any, context: grpc.ServicerContext) -> bytes:
        return self._database_pb(self.catalog.database(request.name)).SerializeToString()

    def list_databases(self, request: Any, context: grpc.ServicerContext) -> bytes:
        self.catalog.instance(request.parent)
        databases = [self._database_pb(d) for d in self.catalog.databases_of(request.parent)]
        return db_types.ListDatabasesResponse.pb()(databases=databases).SerializeToString()

    def drop_database(self, request: Any, context: grpc.ServicerContext) -> bytes:
        self.catalog.drop_database(request.database)
        return empty_pb2.Empty().SerializeToString()

    def get_database_ddl(self, request: Any, context: grpc.ServicerContext) -> bytes:
        with self.catalog.lock:
            statements = self.catalog.database(request.database).schema.ddl()
        return db_types.GetDatabaseDdlResponse.pb()(statements=statements).SerializeToString()

    def update_database_ddl(self, request: Any, context: grpc.ServicerContext) -> bytes:
        operation = self.catalog.update_ddl(request.database, list(request.statements), request.operation_id)
        return self._ddl_operation(operation).SerializeToString()

    @staticmethod
    def _ddl_operation(operation: DdlOperation) -> operations_pb2.Operation:
        metadata = db_types.UpdateDatabaseDdlMetadata.pb()(database=operation.database, statements=list(operation.statements))
        for timestamp in operation.commit_timestamps:
            metadata.commit_timestamps.add().CopyFrom(pb_timestamp(timestamp))
            progress = metadata.progress.add(progress_percent=100)
            progress.start_time.CopyFrom(pb_timestamp(timestamp))
            progress.end_time.CopyFrom(pb_timestamp(timestamp))
        out = operations_pb2.Operation(name=operation.name, done=True)
        out.metadata.CopyFrom(_pack(metadata))
        out.response.CopyFrom(_pack(empty_pb2.Empty()))
        return out

    def _all_operations(self, prefix: str) -> list[operations_pb2.Operation]:
        with self.catalog.lock:
            ddl_ops = [op for db in self.catalog.databases.values() for op in db.operations if op.name.startswith(prefix)]
        with self._lock:
            others = [op for name, op in self._operations.items() if name.startswith(prefix)]
        return others + [self._ddl_operation(op) for op in ddl_ops]

    def list_database_operations(self, request: Any, context: grpc.ServicerContext) -> bytes:
        self.catalog.instance(request.parent)
        keep = _operation_filter(request.filter)
        operations = [op for op in self._all_operations(request.parent + "/databases/") if keep(op)]
        return db_types.ListDatabaseOperationsResponse.pb()(operations=operations).SerializeToString()

    # -- google.longrunning.Operations ----------------------------------------------------------

    def get_operation(self, request: Any, context: grpc.ServicerContext) -> bytes:
        for operation in self._all_operations(request.name):
            if operation.name == request.name:
                return operation.SerializeToString()
        raise QueryError("NOT_FOUND", f"Operation not found: {request.name}")

    def list_operations(self, request: Any, context: grpc.ServicerContext) -> bytes:
        keep = _operation_filter(request.filter)
        operations = [op for op in self._all_operations(request.name) if keep(op)]
        return operations_pb2.ListOperationsResponse(operations=operations).SerializeToString()

    def cancel_operation(self, request: Any, context: grpc.ServicerContext) -> bytes:
        return empty_pb2.Empty().SerializeToString()  # already done: nothing to cancel


def _operation_filter(text: str) -> Callable[[operations_pb2.Operation], bool]:
    """AND-ed terms of an operations filter: name, done, metadata.@type, metadata.database (`:` or `=`)."""
    checks: list[Callable[[operations_pb2.Operation], bool]] = []
    for raw in re.split(r"\s+AND\s+", text.strip()) if text.strip() else []:
        match = _FILTER_TERM.match(raw.strip())
        if match is None:
            raise QueryError("INVALID_ARGUMENT", f"Unsupported operations filter term {raw!r}: expected field:value joined by AND")
        checks.append(_filter_check(*match.groups()))
    return lambda op: all(check(op) for check in checks)


def _filter_check(field: str, operator: str, value: str) -> Callable[[operations_pb2.Operation], bool]:
    def name(op: operations_pb2.Operation) -> bool:
        return op.name == value if operator == "=" else value in op.name

    def done(op: operations_pb2.Operation) -> bool:
        return op.done == (value.lower() == "true")

    def metadata_type(op: operations_pb2.Operation) -> bool:
        return op.metadata.type_url == value or op.metadata.type_url.endswith("/" + value)

    def metadata_database(op: operations_pb2.Operation) -> bool:
        return value.encode() in op.metadata.value

    checks = {"name": name, "done": done, "metadata.@type": metadata_type, "metadata.database": metadata_database}
    if field not in checks:
        raise QueryError("INVALID_ARGUMENT", f"Unsupported operations filter field {field!r}: expected {', '.join(checks)}")
    return checks[field]


def handlers(service: AdminService) -> list[grpc.GenericRpcHandler]:
    def unary(method: Callable[[Any, grpc.ServicerContext], bytes], request_type: Any) -> grpc.RpcMethodHandler:
        parse = request_type.FromString if hasattr(request_type, "FromString") else request_type.pb().FromString

        def handle(request: Any, context: grpc.ServicerContext) -> bytes:
            try:
                return method(request, context)
            except Exception as exc:
                if type(exc) is Exception:  # raised by context.abort()
                    raise
                abort(context, exc)
                raise

        return grpc.unary_unary_rpc_method_handler(handle, request_deserializer=parse)

    s = service
    return [
        grpc.method_handlers_generic_handler("google.spanner.admin.instance.v1.InstanceAdmin", {
            "CreateInstance": unary(s.create_instance, inst_types.CreateInstanceRequest),
            "GetInstance": unary(s.get_instance, inst_types.GetInstanceRequest),
            "ListInstances": unary(s.list_instances, inst_types.ListInstancesRequest),
            "DeleteInstance": unary(s.delete_instance, inst_types.DeleteInstanceRequest),
            "ListInstanceConfigs": unary(s.list_instance_configs, inst_types.ListInstanceConfigsRequest),
            "GetInstanceConfig": unary(s.get_instance_config, inst_types.GetInstanceConfigRequest),
        }),
        grpc.method_handlers_generic_handler("google.spanner.admin.database.v1.DatabaseAdmin", {
            "CreateDatabase": unary(s.create_database, db_types.CreateDatabaseRequest),
            "GetDatabase": unary(s.get_database, db_types.GetDatabaseRequest),
            "ListDatabases": unary(s.list_databases, db_types.ListDatabasesRequest),
            "DropDatabase": unary(s.drop_database, db_types.DropDatabaseRequest),
            "GetDatabaseDdl": unary(s.get_database_ddl, db_types.GetDatabaseDdlRequest),
            "UpdateDatabaseDdl": unary(s.update_database_ddl, db_types.UpdateDatabaseDdlRequest),
            "ListDatabaseOperations": unary(s.list_database_operations, db_types.ListDatabaseOperationsRequest),
        }),
        grpc.method_handlers_generic_handler("google.longrunning.Operations", {
            "GetOperation": unary(s.get_operation, operations_pb2.GetOperationRequest),
            "ListOperations": unary(s.list_operations, operations_pb2.ListOperationsRequest),
            "CancelOperation": unary(s.cancel_operation, operations_pb2.CancelOperationRequest),
            "DeleteOperation": unary(s.cancel_operation, operations_pb2.DeleteOperationRequest),
        }),
    ]

