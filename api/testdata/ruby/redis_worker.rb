# A worker writing with redis-rb (Debian's ruby-redis; the client of
# Sidekiq, Resque and Rails' Redis cache store) through fencegate's RESP
# listener, as api/resp's TestClientPrograms runs it:
#   ruby redis_worker.rb <port> <fence> <token> <auth-token|-> <tag>
# It connects with AUTH fence token and CLIENT SETNAME, AUTHs again with
# auth-token unless it is -, then writes keys {fence}:<tag>*: plain
# commands, a pipeline and MULTI/EXEC, and a Lua script, which must be
# refused. It prints "OK" or "ERR <message>".
require "redis"

port, fence, token, auth_token, tag = ARGV
k = "{#{fence}}:#{tag}"
begin
  r = Redis.new(host: "127.0.0.1", port: Integer(port), username: fence, password: token,
                id: "rb-worker", reconnect_attempts: 0, timeout: 10)
  r.auth(fence, auth_token) unless auth_token == "-"
  r.set(k, "v")
  raise "GET: #{r.get(k).inspect}" unless r.get(k) == "v"
  res = r.pipelined do |p|
    p.incr("#{k}-n")
    p.hset("#{k}-h", "f", "1")
  end
  raise "pipeline: #{res.inspect}" unless res == [1, 1]
  res = r.multi do |m|
    m.rpush("#{k}-l", %w[a b])
    m.lrange("#{k}-l", 0, -1)
  end
  raise "MULTI: #{res.inspect}" unless res == [2, %w[a b]]
  begin
    r.eval("return 1")
    raise "a Lua script was not refused"
  rescue Redis::CommandError => e
    raise "a Lua script: #{e.message}" unless e.message.start_with?("COMMAND_NOT_ALLOWED ")
  end
  puts "OK"
rescue Redis::BaseError => e
  puts "ERR #{e.message}"
ensure
  r&.close
end
