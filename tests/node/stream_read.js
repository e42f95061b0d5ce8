// What both Node.js client checks share: a timestamp as RFC 3339, and the change stream read partition by
// partition from the first query to its children, as a user of the official client reads one.
'use strict';

function iso(timestamp) {
  // a google.protobuf.Timestamp as RFC 3339 with all nine fraction digits
  const seconds = new Date(Number(String(timestamp.seconds)) * 1000).toISOString().slice(0, 19);
  return `${seconds}.${String(timestamp.nanos || 0).padStart(9, '0')}Z`;
}

// Every mod of every data change record in [from, end] of the stream, each with its record: [{data, mod}, ...].
async function readMods(database, postgres, stream, from, end) {
  const sql = postgres
    ? `SELECT * FROM spanner.read_json_${stream}($1, $2, $3, $4, null)`
    : `SELECT ChangeRecord FROM READ_${stream}(start_timestamp => @p1, end_timestamp => @p2, partition_token => @p3, heartbeat_milliseconds => @p4)`;
  const types = {p1: 'timestamp', p2: 'timestamp', p3: 'string', p4: 'int64'};
  const mods = [];
  const pending = [[null, from]];
  const seen = new Set();
  while (pending.length) {
    const [token, at] = pending.shift();
    const [rows] = await database.run({sql, params: {p1: at, p2: end, p3: token, p4: 1000}, types, json: true});
    for (const row of rows) {
      // the PostgreSQL column is PG_JSONB, which the client hands over wrapped: {value: {...}}
      const elements = postgres ? [Object.values(row)[0].value] : row.ChangeRecord;
      for (const element of elements) {
        const data = postgres ? element.data_change_record : element.data_change_record[0];
        const children = postgres ? element.child_partitions_record : element.child_partitions_record[0];
        for (const mod of data ? data.mods : []) {
          mods.push({data, mod});
        }
        for (const child of children ? children.child_partitions : []) {
          if (!seen.has(child.token)) {
            seen.add(child.token);
            pending.push([child.token, children.start_timestamp]);
          }
        }
      }
    }
  }
  return mods;
}

module.exports = {iso, readMods};
