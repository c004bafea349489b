-- POST /customers' unit of work as dealbase sends it: opened by BEGIN with the switch to the
-- tenant's role in the same round trip (tenancy/roles.py), then the insert, then COMMIT.
-- bench/run.py runs it with -M simple (the first line is two statements in one round trip,
-- which only the simple protocol carries), the tenant's schema as search_path (PGOPTIONS) and
-- -D role=<the tenant's role> -D department_id=... (written in quotes: -M simple substitutes
-- variables as text).
BEGIN \; SET LOCAL ROLE :role;
INSERT INTO customers (
    id, department_id, last_name, first_name, company, website, title, phone_1, phone_2,
    phone_3, phone_1_label, phone_2_label, phone_3_label, email, postcode, address,
    address_addition, city, country, state, contact_origin, birthday, note, created_at, updated_at)
  VALUES (
    encode(set_bit(set_bit(overlay(uuid_send(gen_random_uuid()) PLACING
      substring(int8send(floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint) FROM 3)
      FROM 1 FOR 6), 52, 1), 53, 1), 'hex')::uuid,
    ':department_id', 'Lovelace', 'Ada', 'Analytical Engines Ltd', NULL, NULL, NULL, NULL,
    NULL, NULL, NULL, NULL, 'ada@example.com', NULL, NULL,
    NULL, 'London', NULL, NULL, NULL, NULL, NULL, now(), now())
  RETURNING id, department_id, last_name, first_name, company, website, title, phone_1, phone_2,
    phone_3, phone_1_label, phone_2_label, phone_3_label, email, postcode, address,
    address_addition, city, country, state, contact_origin, birthday, note, created_at,
    updated_at;
COMMIT;
