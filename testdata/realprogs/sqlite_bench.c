/* sqlite-bench WORKLOAD SCALE: a database engine workload over the SQLite
 * amalgamation, in memory so that disk timing does not enter.
 *   insert   - SCALE*1000 rows inserted in transactions, then an index built
 *   query    - a table of SCALE*1000 rows, then range scans, GROUP BY, joins
 *   mixed    - updates, deletes and LIKE scans over SCALE*1000 rows
 * Prints a checksum of the results so that builds can be compared. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "sqlite3.h"

static sqlite3 *db;
static unsigned long long checksum;

static void die(const char *what) {
    fprintf(stderr, "sqlite-bench: %s: %s\n", what, sqlite3_errmsg(db));
    exit(1);
}

static void exec(const char *sql) {
    char *err = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &err) != SQLITE_OK) {
        fprintf(stderr, "sqlite-bench: %s: %s\n", sql, err);
        exit(1);
    }
}

/* Runs a query and folds every column of every row into the checksum. */
static void fold(const char *sql) {
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) die(sql);
    while (sqlite3_step(st) == SQLITE_ROW) {
        for (int c = 0; c < sqlite3_column_count(st); c++)
            checksum = checksum * 31 + (unsigned long long)sqlite3_column_int64(st, c);
    }
    sqlite3_finalize(st);
}

static unsigned long long rng = 88172645463325252ull;
static unsigned long long next(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static void fill(int rows) {
    exec("CREATE TABLE t(id INTEGER PRIMARY KEY, a INTEGER, b INTEGER, name TEXT)");
    exec("CREATE TABLE u(a INTEGER PRIMARY KEY, label TEXT)");
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, "INSERT INTO t(a, b, name) VALUES (?, ?, ?)", -1, &st, NULL)) die("prepare");
    exec("BEGIN");
    char name[32];
    for (int i = 0; i < rows; i++) {
        sqlite3_bind_int(st, 1, (int)(next() % 1000));
        sqlite3_bind_int(st, 2, (int)(next() % 100000));
        snprintf(name, sizeof name, "n%llx", next() % 0xfffff);
        sqlite3_bind_text(st, 3, name, -1, SQLITE_TRANSIENT);
        if (sqlite3_step(st) != SQLITE_DONE) die("insert");
        sqlite3_reset(st);
        if (i % 10000 == 9999) {
            exec("COMMIT");
            exec("BEGIN");
        }
    }
    exec("COMMIT");
    sqlite3_finalize(st);
    exec("BEGIN");
    for (int i = 0; i < 1000; i++) {
        char sql[96];
        snprintf(sql, sizeof sql, "INSERT INTO u VALUES (%d, 'label%d')", i, i * 7);
        exec(sql);
    }
    exec("COMMIT");
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: sqlite-bench insert|query|mixed SCALE\n");
        return 2;
    }
    int rows = atoi(argv[2]) * 1000;
    if (sqlite3_open(":memory:", &db) != SQLITE_OK) die("open");
    fill(rows);
    if (!strcmp(argv[1], "insert")) {
        exec("CREATE INDEX tb ON t(b)");
        exec("CREATE INDEX tn ON t(name)");
        fold("SELECT count(*), sum(b) FROM t WHERE b BETWEEN 100 AND 90000");
    } else if (!strcmp(argv[1], "query")) {
        exec("CREATE INDEX ta ON t(a)");
        for (int i = 0; i < 40; i++) {
            char sql[160];
            snprintf(sql, sizeof sql, "SELECT a, count(*), sum(b), max(name) FROM t WHERE a %% 40 = %d GROUP BY a", i);
            fold(sql);
        }
        fold("SELECT u.label, count(*) FROM t JOIN u ON t.a = u.a WHERE t.b < 50000 GROUP BY u.label ORDER BY 2 DESC LIMIT 20");
        fold("SELECT sum(length(name)) FROM t WHERE name LIKE '%a%'");
    } else if (!strcmp(argv[1], "mixed")) {
        for (int i = 0; i < 20; i++) {
            char sql[128];
            snprintf(sql, sizeof sql, "UPDATE t SET b = b + 1 WHERE a = %d", i * 37 % 1000);
            exec(sql);
            snprintf(sql, sizeof sql, "DELETE FROM t WHERE a = %d AND b %% 7 = 0", i * 53 % 1000);
            exec(sql);
        }
        fold("SELECT count(*), sum(b) FROM t WHERE name LIKE 'n1%' OR name LIKE '%ff%'");
        fold("SELECT a, avg(b) FROM t GROUP BY a ORDER BY 2 LIMIT 10");
    } else {
        fprintf(stderr, "sqlite-bench: unknown workload %s\n", argv[1]);
        return 2;
    }
    sqlite3_close(db);
    printf("checksum %llu\n", checksum);
    return 0;
}
