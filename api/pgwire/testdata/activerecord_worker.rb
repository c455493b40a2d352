# A worker writing with Rails' ActiveRecord 6.1 over ruby-pg (Debian's
# ruby-activerecord and ruby-pg: session SETs and a read of the types as
# each connection opens, create! and update! each in a transaction of its
# own, a nested transaction as a savepoint rolled back, SELECT ... FOR
# UPDATE, a serializable transaction, insert_all, update_all) through
# fencegate's PostgreSQL listener, as TestDrivers runs it:
#   ruby activerecord_worker.rb <port> <fence> <token> <set-token|-> <table> <tag>
# It connects with the fence and token in the startup options, SETs
# fencegate.token first unless set-token is -, then writes rows whose v
# starts with tag. It prints "OK <rows with tag>" or "ERR <SQLSTATE> <message>".
require "active_record"

port, fence, token, set_token, table, tag = ARGV
ActiveRecord::Base.establish_connection(
  adapter: "postgresql", host: "127.0.0.1", port: Integer(port), username: "worker", database: "postgres",
  options: "-c fencegate.fence=#{fence} -c fencegate.token=#{token}", pool: 1)

class Row < ActiveRecord::Base; end
Row.table_name = table

begin
  # ActiveRecord's connections are in autocommit between its transactions.
  Row.connection.execute("SET fencegate.token = #{Integer(set_token)}") if set_token != "-"
  Row.create!(v: "#{tag}-create")
  Row.transaction do
    Row.create!(v: "#{tag}-tx")
    Row.transaction(requires_new: true) do
      Row.create!(v: "#{tag}-savepoint")
      raise ActiveRecord::Rollback
    end
    Row.lock.find_by!(v: "#{tag}-create").update!(v: "#{tag}-created")
  end
  # BEGIN, then SET TRANSACTION ISOLATION LEVEL: the check goes after it.
  Row.transaction(isolation: :serializable) { Row.create!(v: "#{tag}-ser") }
  Row.insert_all([{ v: "#{tag}-all1" }, { v: "#{tag}-all2" }])
  Row.where(v: "#{tag}-all1").update_all(v: "#{tag}-all1u")
  puts "OK #{Row.where("v LIKE ?", "#{tag}-%").count}"
rescue ActiveRecord::ActiveRecordError => e
  c = e.cause
  r = c.respond_to?(:result) ? c.result : nil
  if r
    puts "ERR #{r.error_field(PG::PG_DIAG_SQLSTATE)} #{r.error_field(PG::PG_DIAG_MESSAGE_PRIMARY)}"
  else
    puts "ERR ? #{(c || e).message.lines.first.strip}"
  end
end
