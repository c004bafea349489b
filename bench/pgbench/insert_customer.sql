-- The baseline service's POST /customers as SQL, for pgbench: the API key looked up in the
-- control schema, then the customer inserted and returned, each statement in autocommit as the
-- baseline runs them (two round trips). bench/run.py runs it with -M prepared, the tenant's
-- schema as search_path (PGOPTIONS) and -D key_id=... -D department_id=...
-- The id is a UUIDv7 (time first), as dealbase and the baseline make them.
SELECT k.secret_hash, k.department_id, k.revoked_at IS NOT NULL, k.tenant_id, t.schema_name
  FROM control.api_keys AS k JOIN control.tenants AS t ON t.id = k.tenant_id
  WHERE k.id = :key_id;
INSERT INTO customers (
    id, department_id, last_name, first_name, company, website, title, phone_1, phone_2,
    phone_3, phone_1_label, phone_2_label, phone_3_label, email, postcode, address,
    address_addition, city, country, state, contact_origin, birthday, note, created_at, updated_at)
  VALUES (
    encode(set_bit(set_bit(overlay(uuid_send(gen_random_uuid()) PLACING
      substring(int8send(floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint) FROM 3)
      FROM 1 FOR 6), 52, 1), 53, 1), 'hex')::uuid,
    :department_id, 'Lovelace', 'Ada', 'Analytical Engines Ltd', NULL, NULL, NULL, NULL,
    NULL, NULL, NULL, NULL, 'ada@example.com', NULL, NULL,
    NULL, 'London', NULL, NULL, NULL, NULL, NULL, now(), now())
  RETURNING id, department_id, last_name, first_name, company, website, title, phone_1, phone_2,
    phone_3, phone_1_label, phone_2_label, phone_3_label, email, postcode, address,
    address_addition, city, country, state, contact_origin, birthday, note, created_at,
    updated_at;
