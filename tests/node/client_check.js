// The official Node.js Spanner client against the local server, used as one uses the Cloud Spanner emulator
// (SPANNER_EMULATOR_HOST). Writes with mutations and DML, reads at a past timestamp, runs range / ORDER BY /
// LIMIT queries and an index read, reads the change stream; prints what it saw as one JSON object for
// tests/integration/local_spanner/test_node_client.py to compare with what Spanner's semantics give.
'use strict';

const {Spanner} = require('@google-cloud/spanner');
const {iso, readMods} = require('./stream_read');

const [project, instanceId, databaseId, dialect] = process.argv.slice(2);
const postgres = dialect === 'POSTGRESQL';
const p = (n, name) => (postgres ? `$${n}` : `@${name}`);
const names = values => Object.fromEntries(Object.entries(values).map(([k, v], i) => [postgres ? `p${i + 1}` : k, v]));

function plain(rows) {
  return rows.map(row => row.toJSON({wrapNumbers: false}));
}

async function query(database, sql, params = {}, types = {}, bounds = undefined) {
  const [rows] = await database.run({sql, params: names(params), types: names(types)}, bounds);
  return plain(rows);
}

async function readStream(database, start, end) {
  const mods = await readMods(database, postgres, 's', start, end);
  return mods.map(({data, mod}) => ({table: data.table_name, mod_type: data.mod_type, keys: mod.keys, new_values: mod.new_values,
    old_values: mod.old_values}));
}

async function main() {
  const spanner = new Spanner({projectId: project});
  const database = spanner.instance(instanceId).database(databaseId);
  const singers = database.table('singers');
  const out = {};

  const [first] = await singers.insert([1, 2, 3, 4, 5, 6].map(id => ({id: Spanner.int(id), name: `s${id}`, score: id * 10})));
  out.first_commit = iso(first.commitTimestamp);
  const dml = await database.runTransactionAsync(async transaction => {
    const [inserted] = await transaction.runUpdate({
      sql: `INSERT INTO singers (id, name, score) VALUES (${p(1, 'id')}, 'dml', 70)`,
      params: names({id: Spanner.int(7)}), types: names({id: 'int64'}),
    });
    const [updated] = await transaction.runUpdate({sql: `UPDATE singers SET score = score + 1 WHERE id <= 2`});
    const [deleted] = await transaction.runUpdate({sql: `DELETE FROM singers WHERE id = 6`});
    const [response] = await transaction.commit();
    return {counts: [inserted, updated, deleted], commit: iso(response.commitTimestamp)};
  });
  out.dml_counts = dml.counts;
  out.dml_commit = dml.commit;
  const [last] = await singers.update([{id: Spanner.int(3), name: 'renamed'}]);
  out.last_commit = iso(last.commitTimestamp);

  const past = {readTimestamp: first.commitTimestamp};
  out.past_query = await query(database, 'SELECT id, name, score FROM singers ORDER BY id', {}, {}, past);
  const [pastRead] = await singers.read({columns: ['id', 'name'], keySet: {all: true}}, past);
  out.past_read = plain(pastRead);
  out.now_query = await query(database, 'SELECT id, name, score FROM singers ORDER BY id');
  out.range_query = await query(database, `SELECT id FROM singers WHERE score > ${p(1, 'low')} AND id != 4 ORDER BY score DESC LIMIT 3`,
    {low: Spanner.int(15)}, {low: 'int64'});
  out.count = await query(database, 'SELECT COUNT(*) AS n FROM singers WHERE name IS NOT NULL');
  const [byName] = await singers.read({columns: ['name', 'id'], ranges: [{startClosed: ['r'], endOpen: ['s4']}], index: 'by_name'});
  out.index_read = plain(byName);
  try {
    await singers.read({columns: ['id'], keySet: {all: true}, index: 'no_such_index'});
    out.unknown_index = 'no error';
  } catch (error) {
    out.unknown_index = error.code; // a gRPC status code number
  }
  out.records = await readStream(database, iso(first.commitTimestamp), iso(last.commitTimestamp));
  await database.close();
  spanner.close();
  process.stdout.write(JSON.stringify(out) + '\n');
}

main().catch(error => {
  process.stderr.write(`${error.stack || error}\n`);
  process.exit(1);
});
