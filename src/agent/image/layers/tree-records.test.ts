import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { TreeRecords } from "./tree-records.ts";

const meta = { mode: 0o755, uid: 0, gid: 0, mtime: 0 };

describe("TreeRecords.forget()", () => {
  it("drops a directory with every record below it, and nothing beside it", () => {
    const records = new TreeRecords();
    for (const key of ["p", "p/q", "p/q/r", "pq"]) {
      records.dirs.add(key);
      records.dirMeta.set(key, meta);
    }
    records.specials.set("p/q/dev", { ...meta, kind: "char", major: 1, minor: 3 });
    records.xattrs.set("p/f", { "user.a": Buffer.from("x") });
    records.forget("p");
    assert.deepEqual([...records.dirs].sort(), ["", "pq"]);
    assert.deepEqual([...records.dirMeta.keys()], ["pq"]);
    assert.equal(records.specials.size, 0);
    assert.equal(records.xattrs.size, 0);
  });

  it("drops the records of a path that is not a directory (or not there at all)", () => {
    const records = new TreeRecords();
    records.xattrs.set("f", { "user.a": Buffer.from("x") });
    records.forget("f");
    records.forget("missing");
    assert.equal(records.xattrs.size, 0);
  });

  it("refuses to forget the root", () => assert.throws(() => new TreeRecords().forget(""), /root/));
});
