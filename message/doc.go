// Package message holds the data types every part of Sluice shares: [Message] (what a
// producer sends), [MessageExt] (what the broker stores and a consumer receives),
// [MessageQueue], [SendResult], the RocketMQ property names, and the binary encodings
// the RocketMQ 4.x remoting protocol uses for them:
//
//   - the properties string (name 0x01 value 0x02 ...), see [MarshalProperties];
//   - the stored message record of the commitlog, pull responses and message queries
//     (magic code 0xDAA320A7), see [EncodeRecord] and [DecodeRecord];
//   - the batch body of SEND_BATCH_MESSAGE (RocketMQ request code 320), see [EncodeBatch];
//   - the offset message id (store host + port + commitlog offset), see [OffsetMsgID].
//
// It also validates topics, tags and sizes with typed errors ([*ValidationError]).
// The package imports only the standard library.
package message
