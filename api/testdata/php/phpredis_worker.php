<?php
// A worker writing with phpredis (Debian's php-redis; the Redis client of
// Laravel's locks and schedulers) through fencegate's RESP listener, as
// api/resp's TestClientLibraries runs it:
//   php phpredis_worker.php <port> <fence> <token> <auth-token|-> <tag>
// It connects and AUTHs with fence and token (auth(['user', 'pass'])),
// AUTHs again with auth-token unless it is -, then writes keys
// {fence}:<tag>*: plain commands, a pipeline, MULTI/EXEC, and a Lua
// script, which must be refused. It prints "OK" or "ERR <message>".
[, $port, $fence, $token, $authToken, $tag] = $argv;
$k = '{' . $fence . '}:' . $tag;
try {
    $r = new Redis();
    $r->connect('127.0.0.1', (int)$port, 5.0);
    if (!$r->auth([$fence, $token])) {
        throw new RedisException('AUTH: ' . $r->getLastError());
    }
    $r->client('setname', 'php-worker');
    if ($authToken !== '-' && !$r->auth([$fence, $authToken])) {
        throw new RedisException('AUTH: ' . $r->getLastError());
    }
    if ($r->set($k, 'v') !== true) {
        throw new RedisException($r->getLastError() ?? 'SET failed');
    }
    if ($r->get($k) !== 'v') {
        throw new RedisException('GET: not v');
    }
    $res = $r->pipeline()->incr("$k-n")->hSet("$k-h", 'f', '1')->exec();
    if ($res !== [1, 1]) {
        throw new RedisException('pipeline: ' . json_encode($res) . ' ' . $r->getLastError());
    }
    $res = $r->multi()->rPush("$k-l", 'a', 'b')->lRange("$k-l", 0, -1)->exec();
    if ($res !== [2, ['a', 'b']]) {
        throw new RedisException('MULTI: ' . json_encode($res) . ' ' . $r->getLastError());
    }
    // phpredis throws a script's error reply.
    $refused = '';
    try {
        $r->eval('return 1');
    } catch (RedisException $e) {
        $refused = $e->getMessage();
    }
    if (!str_starts_with($refused, 'COMMAND_NOT_ALLOWED ')) {
        throw new RedisException("a Lua script: got '$refused', want COMMAND_NOT_ALLOWED");
    }
    echo "OK\n";
} catch (RedisException $e) {
    echo 'ERR ', $e->getMessage(), "\n";
}
