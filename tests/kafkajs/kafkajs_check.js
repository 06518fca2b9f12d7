// KafkaJS 2.2.4 against a broker: admin (createTopics, alterConfigs, describeConfigs
// with includeSynonyms, fetchOffsets), a read_committed consumer in a group, a
// transactional producer with sendOffsets (consume-transform-produce, one transaction
// per input record), an aborted transaction, and a second read_committed consumer.
//
//   node kafkajs_check.js BOOTSTRAP PREFIX
//
// Prints one line per step, `STEP <name> OK <json detail>` or `STEP <name> FAIL <error>`,
// then `DONE` (tests/differential/test_kafkajs.py asserts on them).
'use strict'

const { Kafka, logLevel, ConfigResourceTypes } = require('kafkajs')

const [bootstrap, prefix] = process.argv.slice(2)
const RECORDS = 10

const kafka = new Kafka({
  clientId: 'txbroker-kafkajs',
  brokers: [bootstrap],
  logLevel: logLevel.ERROR,
  retry: { retries: 8, initialRetryTime: 100 },
})

function step(name, ok, detail) {
  const text = ok ? JSON.stringify(detail === undefined ? null : detail) : String(detail)
  console.log(`STEP ${name} ${ok ? 'OK' : 'FAIL'} ${text.replace(/\n/g, ' ')}`)
}

async function run(name, fn) {
  try {
    const detail = await fn()
    step(name, true, detail)
    return detail
  } catch (e) {
    step(name, false, `${e.name}: ${e.message}${e.type ? ` (${e.type})` : ''}`)
    return undefined
  }
}

const sleep = ms => new Promise(resolve => setTimeout(resolve, ms))

async function readCommitted(topic, groupId, count, timeoutMs) {
  const consumer = kafka.consumer({ groupId, readUncommitted: false, maxWaitTimeInMs: 100 })
  await consumer.connect()
  await consumer.subscribe({ topic, fromBeginning: true })
  const values = []
  await consumer.run({
    eachMessage: async ({ message }) => { values.push(message.value.toString()) },
  })
  const deadline = Date.now() + timeoutMs
  while (values.length < count && Date.now() < deadline) await sleep(100)
  await sleep(500) // anything more (an aborted record) would arrive now
  await consumer.disconnect()
  return values
}

async function main() {
  const admin = kafka.admin()
  await admin.connect()
  const input = `${prefix}-in`
  const output = `${prefix}-out`

  await run('create_topics', async () => {
    const created = await admin.createTopics({
      topics: [{ topic: input, numPartitions: 1 }, { topic: output, numPartitions: 1 }],
      waitForLeaders: true,
    })
    if (!created) throw new Error('createTopics returned false')
    return created
  })

  await run('alter_configs', async () => {
    const r = await admin.alterConfigs({
      validateOnly: false,
      resources: [{
        type: ConfigResourceTypes.TOPIC,
        name: output,
        configEntries: [{ name: 'retention.ms', value: '86400000' }],
      }],
    })
    return r.resources.map(x => [x.errorCode, x.resourceName])
  })

  await run('describe_configs_synonyms', async () => {
    // A broker may apply a config change a moment after answering it (Kafka's
    // controller): retry until the new value shows.
    const deadline = Date.now() + 10000
    for (;;) {
      const r = await admin.describeConfigs({
        includeSynonyms: true,
        resources: [{ type: ConfigResourceTypes.TOPIC, name: output, configNames: ['retention.ms', 'cleanup.policy'] }],
      })
      const entries = Object.fromEntries(r.resources[0].configEntries.map(e => [e.configName, {
        value: e.configValue,
        source: e.configSource,
        isDefault: e.isDefault,
        synonyms: e.configSynonyms.map(s => [s.configName, s.configValue, s.configSource]),
      }]))
      if (entries['retention.ms'].value === '86400000' || Date.now() > deadline) return entries
      await sleep(200)
    }
  })

  await run('produce_input', async () => {
    const producer = kafka.producer()
    await producer.connect()
    const messages = Array.from({ length: RECORDS }, (_, i) => ({ key: `k${i}`, value: `v${i}` }))
    const r = await producer.send({ topic: input, messages })
    await producer.disconnect()
    return r.map(x => [x.partition, x.errorCode, x.baseOffset])
  })

  const groupId = `${prefix}-group`
  await run('consume_transform_produce', async () => {
    const producer = kafka.producer({
      transactionalId: `${prefix}-tid`, idempotent: true, maxInFlightRequests: 1,
    })
    await producer.connect()
    const consumer = kafka.consumer({ groupId, readUncommitted: false, maxWaitTimeInMs: 100 })
    await consumer.connect()
    await consumer.subscribe({ topic: input, fromBeginning: true })
    let done = 0
    let failure = null
    await consumer.run({
      autoCommit: false,
      eachMessage: async ({ topic, partition, message }) => {
        const txn = await producer.transaction()
        try {
          await txn.send({ topic: output, messages: [{ key: message.key, value: `out:${message.value}` }] })
          await txn.sendOffsets({
            consumerGroupId: groupId,
            topics: [{ topic, partitions: [{ partition, offset: (Number(message.offset) + 1).toString() }] }],
          })
          await txn.commit()
          done += 1
        } catch (e) {
          failure = e
          await txn.abort().catch(() => {})
          throw e
        }
      },
    })
    const deadline = Date.now() + 60000
    while (done < RECORDS && !failure && Date.now() < deadline) await sleep(100)
    await consumer.disconnect()
    // One more transaction, aborted: a read_committed reader must not see it.
    const txn = await producer.transaction()
    await txn.send({ topic: output, messages: [{ key: 'x', value: 'aborted' }] })
    await txn.abort()
    await producer.disconnect()
    if (failure) throw failure
    return done
  })

  await run('read_committed_output', () => readCommitted(output, `${prefix}-reader`, RECORDS, 20000))

  await run('fetch_offsets', async () => {
    const r = await admin.fetchOffsets({ groupId, topics: [input] })
    return r.map(t => [t.topic === input, t.partitions.map(p => [p.partition, p.offset])])
  })

  await admin.disconnect()
  console.log('DONE')
}

main().catch(e => {
  console.log(`STEP main FAIL ${e.name}: ${e.message}`)
  console.log('DONE')
})
