-- Run once by the postgres image when its data directory is new: the service's login role as
-- docs/operations.md ("The database login role") describes it. Not a superuser; NOINHERIT, so
-- that on PostgreSQL 15 it holds none of the tenant roles' privileges outside a unit of work;
-- CREATEROLE, to create a role for each tenant; the owner of the service's database.
-- The password is an example, as in compose.yaml and pgbouncer/userlist.txt.
CREATE ROLE dealbase LOGIN PASSWORD 'dealbase' NOINHERIT CREATEROLE;
CREATE DATABASE dealbase OWNER dealbase;
