// The official Node.js Spanner client against the local server's real-schema features: an ON DELETE CASCADE delete
// and a refused NO ACTION one, a stored generated column written and read, a transaction excluded from change
// streams, a stale read and INFORMATION_SCHEMA across a DROP COLUMN, and the change stream's records (system
// transactions included: the Python side ran a TTL sweep before). Prints one JSON object for
// tests/integration/local_spanner/test_node_client.py to compare with Spanner's documented results.
'use strict';

const {Spanner} = require('@google-cloud/spanner');
const {iso, readMods} = require('./stream_read');

const [project, instanceId, databaseId, dialect, start] = process.argv.slice(2);
const postgres = dialect === 'POSTGRESQL';

async function query(database, sql, bounds = undefined) {
  const [rows] = await database.run({sql}, bounds);
  return rows.map(row => row.toJSON({wrapNumbers: false}));
}

async function readStream(database, stream, from, end) {
  const mods = await readMods(database, postgres, stream, from, end);
  return mods.map(({data, mod}) => ({table: data.table_name, mod_type: data.mod_type, keys: mod.keys, new_values: mod.new_values,
    system: data.is_system_transaction, transaction: data.server_transaction_id}));
}

async function errorCode(work) {
  try {
    await work();
    return 'no error';
  } catch (error) {
    return error.code; // a gRPC status code number
  }
}

async function main() {
  const spanner = new Spanner({projectId: project});
  const database = spanner.instance(instanceId).database(databaseId);
  const out = {};

  await database.table('singers').insert([{singer_id: Spanner.int(1), name: 'a'}, {singer_id: Spanner.int(2), name: 'b'}]);
  await database.table('albums').insert([[1, 1], [1, 2], [2, 1]].map(([s, a]) => ({singer_id: Spanner.int(s), album_id: Spanner.int(a)})));
  await database.table('tours').insert([{singer_id: Spanner.int(2), tour_id: Spanner.int(1)}]);
  await database.table('users').insert([{id: Spanner.int(1), first_name: 'Ann', last_name: 'Lee', note: 'n1'}]);
  const [beforeDrop] = await database.table('users').update([{id: Spanner.int(1), first_name: 'Bea'}]);

  out.orphan = await errorCode(() => database.table('albums').insert([{singer_id: Spanner.int(9), album_id: Spanner.int(1)}]));
  out.direct_generated_write = await errorCode(() => database.table('users').insert([{id: Spanner.int(2), full_name: 'x'}]));
  await database.runTransactionAsync(async transaction => {
    transaction.deleteRows('singers', [1]);
    await transaction.commit();
  });
  out.no_action = await errorCode(() => database.runTransactionAsync(async transaction => {
    transaction.deleteRows('singers', [2]);
    await transaction.commit();
  }));
  await database.runTransactionAsync({excludeTxnFromChangeStreams: true}, async transaction => {
    transaction.insert('users', {id: Spanner.int(3), first_name: 'Hid', last_name: 'Den'});
    await transaction.commit();
  });
  const [operation] = await database.updateSchema(['ALTER TABLE users DROP COLUMN note']);
  await operation.promise();
  const [last] = await database.table('users').insert([{id: Spanner.int(4), first_name: 'Cy', last_name: 'Ko'}]);

  out.users = await query(database, 'SELECT id, full_name FROM users ORDER BY id');
  out.albums = await query(database, 'SELECT singer_id, album_id FROM albums ORDER BY singer_id, album_id');
  const past = {readTimestamp: beforeDrop.commitTimestamp};
  out.past_users = await query(database, 'SELECT id, note, full_name FROM users ORDER BY id', past);
  const columns = postgres
    ? "SELECT column_name FROM information_schema.columns WHERE table_name = 'users' AND table_schema = 'public' ORDER BY column_name"
    : "SELECT COLUMN_NAME AS column_name FROM INFORMATION_SCHEMA.COLUMNS WHERE TABLE_NAME = 'users' AND TABLE_SCHEMA = '' ORDER BY COLUMN_NAME";
  out.past_columns = (await query(database, columns, past)).map(row => row.column_name);
  out.now_columns = (await query(database, columns)).map(row => row.column_name);
  out.everything = await readStream(database, 'everything', start, iso(last.commitTimestamp));
  out.no_ttl = await readStream(database, 'no_ttl', start, iso(last.commitTimestamp));
  await database.close();
  spanner.close();
  process.stdout.write(JSON.stringify(out) + '\n');
}

main().catch(error => {
  process.stderr.write(`${error.stack || error}\n`);
  process.exit(1);
});
