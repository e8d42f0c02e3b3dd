-- PostgreSQL schema, version 3: executions across machines moved to Temporal
-- (orchestrator/temporal/); the execution-request table of version 2 goes.
-- Requests still queued in it are not carried over: drain the old workers
-- before upgrading (docs/deployment.md).

DROP TABLE IF EXISTS execution_requests;
