"""Language detection: code that embeds SQL is its host language (C# with SQL in its strings is C#)."""

from __future__ import annotations

import pytest

from middleware.documents.language import detect_language, signs
from middleware.documents.syntax import C_SHARP, code_only

DAPPER = """\
using Dapper;
using Microsoft.Data.SqlClient;

public sealed class OrderQueries
{
    private readonly string _connectionString;

    public async Task<IEnumerable<Order>> LargeOrdersAsync(decimal min)
    {
        using var connection = new SqlConnection(_connectionString);
        return await connection.QueryAsync<Order>(
            "SELECT o.Id, o.Total FROM Orders o JOIN Customers c ON c.Id = o.CustomerId "
            + "WHERE o.Total > @min GROUP BY o.Id, o.Total ORDER BY o.Total DESC",
            new { min });
    }
}
"""
DAPPER_ONE_CALL = """\
var orders = await connection.QueryAsync<Order>(
    "SELECT Id, Total FROM Orders WHERE CustomerId = @customerId ORDER BY Total DESC",
    new { customerId });
"""
EF_RAW = """\
var orders = await _db.Orders
    .FromSqlRaw("SELECT * FROM Orders WHERE CustomerId = {0} ORDER BY Total", customerId)
    .ToListAsync();
await _db.Database.ExecuteSqlRawAsync(
    "UPDATE Orders SET Status = 'shipped' WHERE Id = {0}", id);
"""
ADO_NET = """\
using (var connection = new SqlConnection(connectionString))
using (var command = new SqlCommand(
    "SELECT COUNT(*) FROM Orders o JOIN Lines l ON l.OrderId = o.Id WHERE o.Total > @min",
    connection))
{
    command.Parameters.AddWithValue("@min", 100);
    connection.Open();
    var count = (int)command.ExecuteScalar();
}
"""
VERBATIM = """\
const string LargeOrders = @"
    SELECT o.Id, o.Total, c.Name
    FROM Orders o
    JOIN Customers c ON c.Id = o.CustomerId
    WHERE o.Total > @min
    GROUP BY c.Name, o.Id, o.Total
    ORDER BY o.Total DESC";
"""
VERBATIM_LOCAL = """\
var sql = @"INSERT INTO Audit (OrderId, Note)
            SELECT Id, 'bulk' FROM Orders WHERE Total > 1000";
"""
RAW_STRING = '''\
namespace Shop.Data;

public static class Queries
{
    public const string Refresh = """
        UPDATE Orders SET Status = 'late'
        WHERE ShippedAt IS NULL AND Status = 'open';
        """;
}
'''
LINQ = """\
var large = from o in db.Orders
            join c in db.Customers on o.CustomerId equals c.Id
            where o.Total > 100
            select new { o.Id, c.Name };
"""
T_SQL = """\
CREATE PROCEDURE dbo.LargeOrders @min money AS
BEGIN
    DECLARE @note nvarchar(50) = N'using System; is not C#';
    SELECT o.Id, o.Total FROM dbo.Orders o
    JOIN dbo.Customers c ON c.Id = o.CustomerId
    WHERE o.Total > @min
    ORDER BY o.Total DESC;
END
"""
PYTHON_WITH_SQL = '''\
import sqlite3

def large_orders(db: sqlite3.Connection, minimum: int) -> list[tuple[int, int]]:
    return db.execute(
        """SELECT id, total FROM orders JOIN lines ON lines.order_id = orders.id
        WHERE total > ? GROUP BY id ORDER BY total DESC""", (minimum,)
    ).fetchall()
'''
JS_WITH_SQL = """\
const { Pool } = require("pg");
const pool = new Pool();
export const largeOrders = async (min) =>
  (await pool.query(`SELECT id, total FROM orders WHERE total > $1 ORDER BY total DESC`, [min])).rows;
"""
MARKDOWN_SQL = """\
The slow query:

```sql
SELECT id, total FROM orders WHERE total > 100 ORDER BY total DESC;
```
"""

COMMAND_TEXT = """\
cmd.CommandText = "SELECT * FROM Orders WHERE Id = @id ORDER BY Id";
cmd.Parameters.AddWithValue("@id", id);
var reader = cmd.ExecuteReader();
"""
EF6_SQL_QUERY = """\
var blogs = context.Blogs
    .SqlQuery("SELECT * FROM dbo.Blogs WHERE Name = @p0 ORDER BY Name", name)
    .ToList();
"""
DAPPER_METHOD = """\
public IEnumerable<Order> Get(int id)
{
    var sql = "SELECT Id, Total FROM Orders WHERE Id = @id GROUP BY Id, Total";
    return _connection.Query<Order>(sql, new { id });
}
"""
STRING_BUILDER = """\
var sb = new StringBuilder();
sb.Append("SELECT o.Id FROM Orders o ");
sb.Append("JOIN Customers c ON c.Id = o.CustomerId ");
sb.Append("WHERE o.Total > 100 ORDER BY o.Id");
"""
ONE_SIGN_OF_CSHARP = """\
var reader = cmd.ExecuteReader(
    "SELECT Id FROM Orders WHERE Total > 100 ORDER BY Total");
"""
T_SQL_NAMING_CSHARP = """\
-- read by OrderRepository.ToList() in the service
SELECT o.Id, o.Total FROM dbo.Orders o
WHERE o.Total > 100
ORDER BY o.Total DESC;
"""


EMBEDDING = {
    "dapper": DAPPER,
    "dapper-call": DAPPER_ONE_CALL,
    "ef-raw": EF_RAW,
    "ado-net": ADO_NET,
    "verbatim": VERBATIM,
    "verbatim-local": VERBATIM_LOCAL,
    "raw": RAW_STRING,
    "command-text": COMMAND_TEXT,
    "ef6-sql-query": EF6_SQL_QUERY,
    "dapper-method": DAPPER_METHOD,
    "string-builder": STRING_BUILDER,
}


@pytest.mark.parametrize("text", [*EMBEDDING.values(), LINQ], ids=[*EMBEDDING, "linq"])
def test_csharp_that_embeds_sql_is_csharp(text: str) -> None:
    """The SQL inside a C# string literal does not make the document SQL; nor does LINQ."""
    assert detect_language(text) == "csharp"


@pytest.mark.parametrize("text", EMBEDDING.values(), ids=list(EMBEDDING))
def test_the_sql_signs_of_these_cases_are_all_inside_literals(text: str) -> None:
    """Each case shows enough SQL signs to pass for SQL, and none outside its strings."""
    assert signs(text, "sql") >= 2
    assert signs(code_only(text, C_SHARP), "sql") == 0


@pytest.mark.parametrize(
    ("text", "expected"),
    [(PYTHON_WITH_SQL, "python"), (JS_WITH_SQL, "javascript")],
    ids=["python", "javascript"],
)
def test_other_hosts_of_sql_are_their_own_language(text: str, expected: str) -> None:
    """Python and JavaScript that embed SQL are Python and JavaScript."""
    assert detect_language(text) == expected


def test_sql_only_inside_the_strings_of_code_is_a_sign_of_that_code() -> None:
    """One sign of C# and a query that is all inside its string: C#, not SQL."""
    assert signs(ONE_SIGN_OF_CSHARP, "csharp") == 1
    assert detect_language(ONE_SIGN_OF_CSHARP) == "csharp"


@pytest.mark.parametrize(
    "text", [T_SQL, MARKDOWN_SQL, T_SQL_NAMING_CSHARP], ids=["t-sql", "markdown", "naming-c#"]
)
def test_sql_is_still_sql(text: str) -> None:
    """T-SQL with @parameters, SQL in prose without a host language, and SQL whose comment
    names C#, stay SQL."""
    assert detect_language(text) == "sql"


@pytest.mark.parametrize(
    "line",
    [
        "  private readonly name: string;",
        "  public async load(): Promise<void> {",
        "  protected static create(id: number): Order {",
    ],
)
def test_typescript_members_are_not_csharp_signs(line: str) -> None:
    """TypeScript writes a member's type after a colon: no C# sign there."""
    assert signs(line, "csharp") == 0
