// An exactly-once consume-transform-produce pipeline with KafkaJS (2.2.4, pinned by
// package.json here; `make kafkajs` installs it), for `txbroker chaos`
// (docs/testing-your-pipeline.md, "Recipes"):
//
//   txbroker chaos --input orders --output payments --instances 2 --duration 60 -- \
//       node tests/kafkajs/chaos_pipeline.js
//
// Each input record goes to the same partition of the output with the same key, each
// polled batch and its offsets in one transaction (sendOffsets). KafkaJS has no static
// membership (group.instance.id): a SIGKILLed member holds its partitions until its
// session times out, so the session is short. Its rebalance runs in the same loop as
// eachBatch, so a rebalance never overlaps a transaction in flight. Crash-only: any
// error ends the process, the supervisor restarts it from the group's committed offsets.
'use strict'

const { Kafka, logLevel } = require('kafkajs')

const env = process.env
const bootstrap = env.TXBROKER_BOOTSTRAP
const instance = env.TXBROKER_INSTANCE || '0'
const source = env.TXBROKER_INPUT || 'orders'
const sink = env.TXBROKER_OUTPUT || 'payments'
const group = env.TXBROKER_GROUP || 'chaos-pipeline'

function crash(why) {
  console.error(`exiting: ${why && why.stack ? why.stack : why}`)
  process.exit(1)
}

async function main() {
  const kafka = new Kafka({
    clientId: `${group}-${instance}`,
    brokers: [bootstrap],
    logLevel: logLevel.WARN,
    // A restarted broker is retried for a while rather than given up on at once.
    retry: { retries: 20, initialRetryTime: 100, maxRetryTime: 2000 },
  })
  const consumer = kafka.consumer({
    groupId: group,
    // No static membership in KafkaJS: a short session lets the group replace a
    // SIGKILLed member in seconds, not the 30 s default.
    sessionTimeout: 6000,
    heartbeatInterval: 1000,
    readUncommitted: false, // read_committed: never pass on input of aborted transactions
    maxWaitTimeInMs: 500,
  })
  const producer = kafka.producer({
    // Stable across restarts: the restarted instance fences its previous incarnation
    // and aborts the transaction it left open.
    transactionalId: `${group}-${instance}`,
    transactionTimeout: 10000,
    idempotent: true,
    maxInFlightRequests: 1,
  })
  consumer.on(consumer.events.CRASH, event => crash(event.payload.error))
  await producer.connect()
  await consumer.connect()
  await consumer.subscribe({ topic: source, fromBeginning: true })
  await consumer.run({
    autoCommit: false,
    eachBatchAutoResolve: false,
    eachBatch: async ({ batch, resolveOffset }) => {
      if (batch.messages.length === 0) return
      const last = batch.messages[batch.messages.length - 1].offset
      const transaction = await producer.transaction()
      try {
        await transaction.send({
          topic: sink,
          messages: batch.messages.map(m => ({ key: m.key, value: m.value, partition: batch.partition })),
        })
        await transaction.sendOffsets({
          consumerGroupId: group,
          topics: [{ topic: batch.topic, partitions: [{ partition: batch.partition, offset: (BigInt(last) + 1n).toString() }] }],
        })
        await transaction.commit()
      } catch (e) {
        crash(e)
      }
      resolveOffset(last)
    },
  })
}

main().catch(crash)
